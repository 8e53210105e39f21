//! The scorer and the sink replay as they were before frames and stacks were interned
//! (strings everywhere), kept as the oracle the interned ones must agree with exactly.

#![allow(dead_code)]

use crate::gen::ThreadTruth;
use crate::score::{Fidelity, Mismatch};
use crate::sink::{ReconThread, Slice};
use anyhow::bail;
use ptscope_event::{Event, EventData, Kind, Symbol, Thread};
use ptsim::expected::{Branch, BranchKind};
use std::collections::HashMap;

/// A sink record with its name resolved, as the old sink stored it.
#[derive(Clone, Debug)]
pub enum Rec {
    Begin {
        name: String,
        time: i64,
        inferred: bool,
    },
    End {
        time: i64,
    },
    Complete {
        name: String,
        start: i64,
        end: i64,
    },
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

/// Does `recon` equal `truth` where each `marker` frame stands for any run of frames
/// (the empty one included)? Tried at every split, as a person would check it.
fn fits(truth: &[u32], recon: &[u32], marker: Option<u32>) -> bool {
    match recon.split_first() {
        None => truth.is_empty(),
        Some((&r, rest)) if Some(r) == marker => {
            (0..=truth.len()).any(|k| fits(&truth[k..], rest, marker))
        }
        Some((&r, rest)) => truth.first() == Some(&r) && fits(&truth[1..], rest, marker),
    }
}

type Pieces = [(u64, u64, Vec<u32>)];

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

/// Frame names as ids; `names` maps ids back (a mismatch is reported by name, and
/// looking an id up by scanning the map made scoring quadratic where most time mismatches,
/// e.g. a snapshot).
#[derive(Default)]
struct Interner {
    ids: HashMap<String, u32>,
    names: Vec<String>,
}

impl Interner {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.names.len() as u32;
        self.ids.insert(s.to_string(), id);
        self.names.push(s.to_string());
        id
    }
    fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map_or("?", String::as_str)
    }
    fn stack(&mut self, v: &[String]) -> Vec<u32> {
        v.iter().map(|s| self.id(s)).collect()
    }
}

/// Scores every thread of `truth` against the matching reconstructed thread.
pub fn score(truth: &[ThreadTruth], recon: &[ReconThread]) -> Fidelity {
    let mut acc = Acc::default();
    let mut f = Fidelity::default();
    for t in truth {
        match recon.iter().find(|r| r.thread == t.thread) {
            Some(r) => score_thread(t, r, &mut acc, &mut f),
            None => {
                f.missing_threads += 1;
                let empty = ReconThread::default();
                score_thread(t, &empty, &mut acc, &mut f);
            }
        }
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

/// The first `limit` non-exact intervals of one thread, to see *why* a writer scores low.
pub fn mismatches(t: &ThreadTruth, r: &ReconThread, limit: usize) -> Vec<Mismatch> {
    let mut acc = Acc::default();
    let mut f = Fidelity::default();
    let mut out = Vec::new();
    score_thread_inner(
        t,
        r,
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

fn score_thread(t: &ThreadTruth, r: &ReconThread, acc: &mut Acc, f: &mut Fidelity) {
    score_thread_inner(t, r, acc, f, None)
}

fn score_thread_inner(
    t: &ThreadTruth,
    r: &ReconThread,
    acc: &mut Acc,
    f: &mut Fidelity,
    mut report: Option<&mut dyn FnMut(Mismatch)>,
) {
    let mut names = Interner::default();
    let (lo, hi) = (t.start(), t.end());
    let truth: Vec<(u64, u64, Vec<u32>)> = t
        .timeline
        .iter()
        .map(|(a, b, s)| (*a, *b, names.stack(s)))
        .collect();
    let recon: Vec<(u64, u64, Vec<u32>)> = r
        .timeline
        .iter()
        .filter(|(a, b, _)| *b > 0 && a < b)
        .map(|(a, b, s)| ((*a).max(0) as u64, *b as u64, names.stack(s)))
        .collect();
    let marker = names
        .ids
        .get(ptscope_stacks::UNKNOWN_FRAMES_MARKER)
        .copied();
    let tight = Windows::new(&t.windows, lo, hi, &truth);
    let order = Windows::new(&t.order_windows, lo, hi, &truth);
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
    let empty: Vec<u32> = Vec::new();
    let (mut ti, mut ri, mut gi) = (0, 0, 0);
    let (mut wi, mut oi) = (0, 0);
    // A window can hold a whole snapshot's truth (timing unknown within it), and the same
    // reconstructed stack recurs interval after interval: its verdict against one window is
    // computed once (comparing it with every candidate each time was quadratic).
    // (exact, suffix, root, exact or marked)
    type Verdict = (bool, bool, bool, bool);
    let mut verdicts: HashMap<(usize, *const Vec<u32>), Verdict> = HashMap::new();
    let mut order_verdicts: HashMap<(usize, *const Vec<u32>), bool> = HashMap::new();
    let mut stack_ids: HashMap<&[u32], *const Vec<u32>> = HashMap::new();
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
        let candidates = tight.at(&mut wi, a, &truth);
        let order_candidates = order.at(&mut oi, a, &truth);
        while gi < t.gaps.len() && t.gaps[gi].1 <= a {
            gi += 1;
        }
        let rs = match recon.get(ri) {
            Some(x) if x.0 <= a => &x.2,
            _ => &empty,
        };
        let ts = truth.get(ti).map_or(&empty, |x| &x.2);
        if memo_wi != wi {
            verdicts.clear();
            memo_wi = wi;
        }
        if memo_oi != oi {
            order_verdicts.clear();
            memo_oi = oi;
        }
        // Equal stacks share one key (the first vector seen with those frames).
        let key = *stack_ids
            .entry(rs.as_slice())
            .or_insert(rs as *const Vec<u32>);
        let (exact, suffix, root, marked) = *verdicts.entry((wi, key)).or_insert_with(|| {
            (
                candidates.iter().any(|c| &c.2 == rs),
                !rs.is_empty() && candidates.iter().any(|c| c.2.ends_with(rs)),
                !rs.is_empty() && candidates.iter().any(|c| c.2.first() == rs.first()),
                candidates.iter().any(|c| fits(&c.2, rs, marker)),
            )
        });
        let in_order = *order_verdicts
            .entry((oi, key))
            .or_insert_with(|| order_candidates.iter().any(|c| &c.2 == rs));
        if let (false, Some(report)) = (exact, report.as_mut()) {
            let name = |v: &[u32]| -> Vec<String> {
                v.iter().map(|&id| names.name(id).to_string()).collect()
            };
            report(Mismatch {
                start: a,
                end: b,
                truth: name(ts),
                recon: name(rs),
                suffix,
                root,
            });
        }
        let in_gap = t.gaps.get(gi).is_some_and(|g| g.0 <= a);
        acc.total += len;
        acc.exact += if exact { len } else { 0 };
        acc.marked += if marked { len } else { 0 };
        acc.root += if root { len } else { 0 };
        acc.strict += if rs == ts { len } else { 0 };
        acc.order += if in_order { len } else { 0 };
        acc.suffix += if suffix { len } else { 0 };
        if !in_gap {
            acc.out_total += len;
            acc.out_exact += if exact { len } else { 0 };
            acc.out_marked += if marked { len } else { 0 };
            acc.out_root += if root { len } else { 0 };
        }
    }

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
        // The end is exclusive: a frame closed at a window's start did not reach it.
        // Order windows, so a real frame merely smeared in time is not a phantom.
        let (ka, kb) = (order.index(a.max(lo)), order.index((b - 1).min(hi).max(a)));
        let range = order.pieces[ka].start..order.pieces[kb].end.max(order.pieces[ka].start);
        let id = names.ids.get(&s.name).copied();
        if id.is_some() && id == marker {
            f.marker_frames += 1;
            continue;
        }
        let real = id.is_some_and(|id| truth[range].iter().any(|p| p.2.contains(&id)));
        if !real {
            f.phantom_frames += 1;
            f.phantoms.push(s.clone());
        }
    }
}

enum Op<'a> {
    Open {
        name: &'a str,
        inferred: bool,
        id: usize,
    },
    CloseTop,
    CloseId(usize),
}

pub fn replay(recs: &[Rec]) -> ReconThread {
    let mut ops: Vec<(i64, Op<'_>)> = Vec::with_capacity(recs.len() + 16);
    for (id, r) in recs.iter().enumerate() {
        match r {
            Rec::Begin {
                name,
                time,
                inferred,
            } => ops.push((
                *time,
                Op::Open {
                    name,
                    inferred: *inferred,
                    id,
                },
            )),
            Rec::End { time } => ops.push((*time, Op::CloseTop)),
            Rec::Complete { name, start, end } => {
                ops.push((
                    *start,
                    Op::Open {
                        name,
                        inferred: false,
                        id,
                    },
                ));
                ops.push((*end.max(start), Op::CloseId(id)));
            }
        }
    }
    // Stable: ties keep arrival order, as a viewer's stable sort does.
    ops.sort_by_key(|(t, _)| *t);

    let mut out = ReconThread::default();
    // (name, start, inferred, id)
    let mut stack: Vec<(&str, i64, bool, usize)> = Vec::new();
    let close = |out: &mut ReconThread, e: (&str, i64, bool, usize), depth: usize, t: i64| {
        out.slices.push(Slice {
            name: e.0.to_string(),
            start: e.1,
            end: t,
            inferred: e.2,
            depth,
        });
    };
    let mut i = 0;
    while i < ops.len() {
        let t = ops[i].0;
        while i < ops.len() && ops[i].0 == t {
            match &ops[i].1 {
                Op::Open { name, inferred, id } => stack.push((name, t, *inferred, *id)),
                Op::CloseTop => match stack.pop() {
                    Some(e) => close(&mut out, e, stack.len(), t),
                    None => out.unmatched_ends += 1,
                },
                Op::CloseId(id) => {
                    if let Some(pos) = stack.iter().rposition(|e| e.3 == *id) {
                        let e = stack.remove(pos);
                        close(&mut out, e, pos, t);
                    }
                }
            }
            i += 1;
        }
        if let Some(&(next, _)) = ops.get(i) {
            if next > t && !stack.is_empty() {
                let names: Vec<String> = stack.iter().map(|e| e.0.to_string()).collect();
                match out.timeline.last_mut() {
                    Some(last) if last.1 == t && last.2 == names => last.1 = next,
                    _ => out.timeline.push((t, next, names)),
                }
            }
        }
    }
    let end = ops.last().map_or(0, |o| o.0);
    while let Some(e) = stack.pop() {
        close(&mut out, e, stack.len(), end);
    }
    out
}

/// The truth of a decoded recording as `sim::thread_truths` built it.
pub fn thread_truths(
    timelines: &[ptsim::stacks::StackTimeline],
    d: &crate::sim::Decoded,
) -> Vec<ThreadTruth> {
    let mut threads: Vec<Thread> = Vec::new();
    for e in &d.events {
        if !threads.contains(&e.thread()) {
            threads.push(e.thread());
        }
    }
    let mut out = Vec::new();
    for th in threads {
        let Some(tl) = timelines.iter().find(|t| Some(t.tid) == th.tid) else {
            continue;
        };
        let (mut windows, mut order_windows, mut gaps) = (Vec::new(), Vec::new(), Vec::new());
        let mut last: Option<u64> = None;
        let mut open_gap: Option<u64> = None;
        // As main's sim::thread_truths: COMM and FORK side-band starts no window.
        let traced = |e: &&Event| {
            !matches!(
                e,
                Event::Ok {
                    data: EventData::Comm { .. } | EventData::Fork { .. },
                    ..
                }
            )
        };
        for e in d.events.iter().filter(|e| e.thread() == th).filter(traced) {
            let Some(time) = e.time().map(|t| t * crate::sim::SCALE).or(last) else {
                continue;
            };
            if let Some(g) = open_gap.take() {
                gaps.push((g, time.max(g)));
            }
            windows.push(time);
            let local = match e {
                Event::Ok {
                    data:
                        EventData::Trace {
                            change: None,
                            kind: Some(Kind::Jump),
                            src,
                            dst,
                        },
                    ..
                } => {
                    let (src, dst) = (d.strings.location(*src), d.strings.location(*dst));
                    matches!((src.symbol, dst.symbol), (Symbol::FromPerf(x), Symbol::FromPerf(y)) if x == y)
                }
                Event::Ok {
                    data: EventData::Power { .. },
                    ..
                } => true,
                _ => false,
            };
            if !local {
                order_windows.push(time);
            }
            if matches!(e, Event::DecodeError { .. }) {
                open_gap = Some(time);
            }
            last = Some(time);
        }
        windows.sort_unstable();
        windows.dedup();
        order_windows.sort_unstable();
        order_windows.dedup();
        let (Some(&lo), Some(&hi)) = (windows.first(), windows.last()) else {
            continue;
        };
        let timeline: Vec<(u64, u64, Vec<String>)> = tl
            .pieces
            .iter()
            .filter(|p| p.1 > lo && p.0 < hi)
            .map(|p| (p.0.max(lo), p.1.min(hi), p.2.clone()))
            .collect();
        if timeline.is_empty() {
            continue;
        }
        out.push(ThreadTruth {
            thread: th,
            timeline,
            windows,
            order_windows,
            gaps,
        });
    }
    out
}

use crate::sim::SCALE;

/// As `sim::MAX_SKIPPED`.
const MAX_SKIPPED: usize = 8;

/// As `sim::reported_kind`.
fn reported_kind(k: ptsim::truth::StepKind) -> bool {
    !matches!(k, ptsim::truth::StepKind::Jcc { taken: false })
}

/// Perf-clock times of a thread's steps as `sim::perf_clock_times` computed them from
/// all of perf's branches at once.
pub fn perf_clock_times(
    t: &ptsim::truth::ThreadTrace,
    exp: &ptsim::expected::ThreadExpectation,
    mine: &[Branch],
    ns: &dyn Fn(u64) -> u64,
) -> anyhow::Result<Vec<u64>> {
    let want: Vec<&Branch> = exp
        .branches
        .iter()
        .filter(|b| b.kind != BranchKind::Uncertain)
        .collect();
    // Anchors: (step index, perf time) of every reported branch that is a true step.
    let mut anchors: Vec<(usize, u64)> = Vec::with_capacity(mine.len());
    let mut j = 0usize;
    // perf reports what the simulation expects, one for one (ptsim's tests check it); a
    // few expected entries perf leaves out (seen at a snapshot's first fault) are skipped.
    let mut skipped = 0usize;
    let mut w = 0usize;
    for r in mine {
        // perf's error codes and times are its own; an error matches by kind.
        let matches = |e: &Branch| {
            if e.kind == BranchKind::Error {
                r.kind == BranchKind::Error
            } else {
                (e.kind, e.from, e.to) == (r.kind, r.from, r.to)
            }
        };
        while w < want.len() && !matches(want[w]) && skipped < MAX_SKIPPED {
            w += 1;
            skipped += 1;
        }
        let Some(e) = want.get(w).filter(|e| matches(e)) else {
            bail!(
                "thread {}: perf reported {r:?}, not among the next expected branches",
                t.tid
            );
        };
        w += 1;
        if e.kind == BranchKind::Error {
            continue;
        }
        // Expected times are true times, so the step is found by time; the search stops
        // once past it (a `tr strt` perf synthesises after an overflow is no step).
        let mut k = j;
        while let Some(s) = t.steps.get(k) {
            let at = ns(s.clock);
            if at > e.time {
                break;
            }
            if at == e.time && s.from == e.from && s.to == e.to && reported_kind(s.kind) {
                anchors.push((k, r.time * SCALE));
                j = k + 1;
                break;
            }
            k += 1;
        }
    }
    let Some(&(first, t_first)) = anchors.first() else {
        bail!("thread {}: no reported branch is a step", t.tid);
    };
    let clock = |i: usize| ns(t.steps[i].clock) * SCALE;
    let mut times = vec![0u64; t.steps.len()];
    // Before the first reported branch (a snapshot's unseen past) and after the last one,
    // true durations are kept; between two, true clocks are mapped linearly onto perf's.
    for (i, x) in times.iter_mut().enumerate().take(first + 1) {
        *x = t_first.saturating_sub(clock(first) - clock(i));
    }
    let mut floor = t_first;
    for w in anchors.windows(2) {
        let ((ia, ta), (ib, tb)) = (w[0], w[1]);
        let tb = tb.max(floor);
        let (ca, cb) = (clock(ia), clock(ib));
        for (i, x) in times.iter_mut().enumerate().take(ib).skip(ia + 1) {
            *x = if cb > ca {
                ta + (tb - ta.min(tb)) * (clock(i) - ca) / (cb - ca)
            } else {
                tb
            };
        }
        times[ib] = tb;
        floor = tb;
    }
    let &(last, t_last) = anchors.last().expect("not empty");
    let t_last = t_last.max(floor);
    for (i, x) in times.iter_mut().enumerate().skip(last) {
        *x = t_last + (clock(i) - clock(last));
    }
    // Steps sharing a timestamp are spread up to the next one, as true times would be
    // (same rule as ptsim's perf-clock truth).
    let mut i = 0;
    while i < times.len() {
        let t0 = times[i];
        let mut k = i;
        while k < times.len() && times[k] == t0 {
            k += 1;
        }
        let t1 = times.get(k).copied().unwrap_or(t0 + 1);
        let m = (k - i) as u64;
        for (n, x) in times[i..k].iter_mut().enumerate() {
            *x = t0 + t1.saturating_sub(t0) * n as u64 / m;
        }
        i = k;
    }
    Ok(times)
}

/// The true stacks of `variant` of `prog` as `SimProgram::simulate` built them: perf's
/// whole output read at once, each thread aligned, then replayed into stacks of names,
/// renamed as strings by `sim::name_truth`.
fn string_truth(
    prog: &crate::sim::SimProgram,
    variant: &str,
    cfg: &ptsim::SimConfig,
) -> anyhow::Result<(Vec<ptsim::stacks::StackTimeline>, std::path::PathBuf)> {
    let sub = prog.dir.join(variant);
    std::fs::create_dir_all(&sub)?;
    let sim = ptsim::simulate(&prog.log, &prog.comm, cfg);
    let data = sub.join("perf.data");
    ptsim::write_outputs(&sim, &data, false)?;
    let reported = ptsim::perfscript::decode(&data)?;
    let ns = |c| sim.ns(c);
    let dso = |a: u64| sim.dso_at(a);
    let mut out = Vec::new();
    for t in &sim.traces {
        let Some(exp) = sim.expected.iter().find(|e| e.tid == t.tid) else {
            continue;
        };
        let mine: Vec<Branch> = reported
            .iter()
            .filter(|b| b.tid == t.tid)
            .copied()
            .collect();
        if mine.is_empty() {
            continue;
        }
        let times = perf_clock_times(t, exp, &mine, &ns)?;
        out.push(ptsim::stacks::timeline_at(t, &times, &prog.syms, &dso));
    }
    crate::sim::name_truth(&mut out, &data, sim.recording.pid);
    Ok((out, data))
}

/// The test programs of `tests/simulated.rs`.
#[path = "../tests/programs/mod.rs"]
mod programs;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::Names;
    use crate::rng::Rng;
    use crate::score::Truth;
    use crate::sink::TimelineSink;
    use crate::{gen, sim, Scenario};
    use ptscope_stacks::StackWriter;

    /// Runs a writer over `sc` and returns its sink (times relative to `earliest_time`).
    fn sink_of<W: StackWriter<TimelineSink>>(
        sc: &Scenario,
        make: fn(TimelineSink, u64) -> W,
    ) -> TimelineSink {
        let mut w = make(TimelineSink::new(), sc.earliest_time());
        for e in &sc.events {
            w.write_event(e, &sc.strings);
        }
        w.finish(&sc.strings)
    }

    fn shifted(mut threads: Vec<ReconThread>, base: i64) -> Vec<ReconThread> {
        for r in &mut threads {
            for p in &mut r.timeline {
                p.0 += base;
                p.1 += base;
            }
            for s in &mut r.slices {
                s.start += base;
                s.end += base;
            }
        }
        threads
    }

    /// The old pipeline: records spelled out, replayed and scored as strings.
    fn old_recon(sink: &TimelineSink, base: i64) -> Vec<ReconThread> {
        sink.spelled_records()
            .into_iter()
            .map(|(thread, recs)| {
                let mut r = replay(&recs);
                r.thread = thread;
                shifted(vec![r], base).remove(0)
            })
            .collect()
    }

    fn same_threads(a: &[ReconThread], b: &[ReconThread]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                x.thread == y.thread
                    && x.timeline == y.timeline
                    && x.slices == y.slices
                    && x.unmatched_ends == y.unmatched_ends
            })
    }

    /// Scores `recon` against `truth` both ways and fails on any difference, mismatch
    /// lists included.
    fn agree(what: &str, truth: &[ThreadTruth], recon: &[ReconThread]) {
        let old = score(truth, recon);
        let new = crate::score::score(truth, recon);
        assert_eq!(old, new, "{what}: scores differ");
        for t in truth {
            if let Some(r) = recon.iter().find(|r| r.thread == t.thread) {
                let m_old = mismatches(t, r, 50);
                let m_new = crate::score::mismatches(t, r, 50);
                assert_eq!(
                    format!("{m_old:?}"),
                    format!("{m_new:?}"),
                    "{what}: mismatches differ"
                );
            }
        }
    }

    /// A reconstruction that goes wrong in the ways writers do: frames dropped, renamed,
    /// added (outer and inner), times moved, pieces lost.
    fn mutate(t: &ThreadTruth, rng: &mut Rng) -> ReconThread {
        let mut timeline = Vec::new();
        let mut slices = Vec::new();
        for (a, b, s) in &t.timeline {
            if rng.chance(0.05) {
                continue;
            }
            let mut s = s.clone();
            match rng.below(8) {
                0 if !s.is_empty() => {
                    s.remove(0);
                }
                1 if !s.is_empty() => {
                    let i = rng.below(s.len() as u64) as usize;
                    s[i] = format!("phantom{}", rng.below(3));
                }
                2 => s.push(format!("extra{}", rng.below(3))),
                3 => s.insert(0, "outer".into()),
                4 if s.len() > 1 => {
                    s.pop();
                }
                _ => {}
            }
            let shift = |x: u64, rng: &mut Rng| x as i64 + rng.range(0, 3) as i64 - 1;
            let (a, b) = (shift(*a, rng), shift(*b, rng));
            if a < b {
                for (depth, name) in s.iter().enumerate() {
                    slices.push(crate::sink::Slice {
                        name: name.clone(),
                        start: a,
                        end: b,
                        inferred: rng.chance(0.2),
                        depth,
                    });
                }
                timeline.push((a, b, s));
            }
        }
        ReconThread {
            thread: t.thread,
            timeline,
            slices,
            unmatched_ends: 0,
        }
    }

    #[test]
    fn interned_scorer_and_replay_agree_with_the_string_ones_on_generated_scenarios() {
        let mut rng = Rng::new(0x5eed);
        let (mut scored, mut markers) = (0, 0);
        for seed in 1..=4u64 {
            for mut spec in gen::standard_specs(seed) {
                spec.params.steps = spec.params.steps.min(1500);
                let sc = gen::generate(&spec);
                let base = sc.earliest_time() as i64;
                let mut sinks = vec![
                    ("legacy", sink_of(&sc, sim::legacy)),
                    ("segments", sink_of(&sc, sim::segments)),
                ];
                // The marker frame appears only in bursts of decode errors.
                if sc.name.contains("bursts") {
                    sinks.push(("segments-marked", sink_of(&sc, sim::segments_marked)));
                }
                for (writer, sink) in &sinks {
                    let what = format!("seed {seed} {} {writer}", sc.name);
                    let old = old_recon(sink, base);
                    assert!(
                        same_threads(&old, &shifted(sink.clone().threads(), base)),
                        "{what}: replays differ"
                    );
                    agree(&what, &sc.truth, &old);
                    // The interned pipeline end to end, as `evaluate` runs it.
                    let mut names = Names::new();
                    let mut recon = sink.clone().into_recon(&mut names);
                    for r in &mut recon {
                        r.shift(base, 1);
                    }
                    let truth: Vec<Truth> = sc
                        .truth
                        .iter()
                        .map(|t| Truth::intern(t, &mut names))
                        .collect();
                    let f = score(&sc.truth, &old);
                    assert_eq!(
                        f,
                        crate::score::score_interned(&truth, &recon, &names),
                        "{what}: interned pipeline differs"
                    );
                    markers += f.marker_frames;
                    scored += 1;
                }
                let mutated: Vec<ReconThread> =
                    sc.truth.iter().map(|t| mutate(t, &mut rng)).collect();
                let what = format!("seed {seed} {} mutated", sc.name);
                agree(&what, &sc.truth, &mutated);
                // A thread without a track, and a track without a truth.
                agree(&what, &sc.truth, &mutated[1..]);
            }
        }
        assert!(scored >= 40, "only {scored} scenario/writer pairs");
        assert!(markers > 0, "no marker frame was scored");
    }

    use super::programs;

    /// `sim::reconstruct_decoded` through the old replay.
    fn old_reconstruct_decoded<W: StackWriter<TimelineSink>>(
        d: &sim::Decoded,
        make: fn(TimelineSink, u64) -> W,
    ) -> Vec<ReconThread> {
        let earliest = d.events.iter().find_map(Event::time).unwrap_or(0);
        let mut w = make(TimelineSink::new(), earliest);
        for e in &d.events {
            w.write_event(e, &d.strings);
        }
        let k = sim::SCALE as i64;
        let mut threads = old_recon(&w.finish(&d.strings), earliest as i64);
        for t in &mut threads {
            for p in &mut t.timeline {
                p.0 *= k;
                p.1 *= k;
            }
            for s in &mut t.slices {
                s.start *= k;
                s.end *= k;
            }
        }
        threads
    }

    /// Scores `variant` of `prog` the new way (streamed, interned) and the old way (a
    /// second, identical simulation decoded into memory and scored as strings), and
    /// fails on any difference: scores, phantoms, the truth and the rebuilt stacks.
    fn same_on_recording(prog: &sim::SimProgram, variant: &str, cfg: &ptsim::SimConfig) {
        use crate::sim::{decode, DecodePath, SCALE};
        let what = format!("{} {variant}", prog.name);
        let new = prog
            .score_detailed(variant, cfg)
            .unwrap_or_else(|e| panic!("{what}: {e:#}"));
        let (timelines, data) = string_truth(prog, &format!("{variant}-strings"), cfg)
            .unwrap_or_else(|e| panic!("{what}: {e:#}"));
        let unscale = |mut f: Fidelity| {
            f.covered_ns /= SCALE;
            for p in &mut f.phantoms {
                p.start /= SCALE as i64;
                p.end /= SCALE as i64;
            }
            f
        };
        let mut old_recon = Vec::new();
        for (path, got) in [
            (DecodePath::Text, &new.text),
            (DecodePath::Dlfilter, &new.dlfilter),
        ] {
            let d = decode(&data, path).expect("decodes");
            let truth = thread_truths(&timelines, &d);
            let l = old_reconstruct_decoded(&d, sim::legacy);
            let g = old_reconstruct_decoded(&d, sim::segments);
            assert_eq!(got.events, d.events.len(), "{what} {path:?}: events");
            assert_eq!(got.threads, truth.len(), "{what} {path:?}: threads");
            assert_eq!(
                got.legacy,
                unscale(score(&truth, &l)),
                "{what} {path:?}: legacy"
            );
            assert_eq!(
                got.segments,
                unscale(score(&truth, &g)),
                "{what} {path:?}: segments"
            );
            if path == DecodePath::Text {
                let detail = new.detail.as_ref().expect("detail kept");
                let spelled: Vec<ThreadTruth> = detail
                    .truth
                    .iter()
                    .map(|t| ThreadTruth {
                        thread: t.thread,
                        timeline: t
                            .timeline
                            .iter()
                            .map(|p| (p.0, p.1, detail.names.names(p.2)))
                            .collect(),
                        windows: t.windows.clone(),
                        order_windows: t.order_windows.clone(),
                        gaps: t.gaps.clone(),
                    })
                    .collect();
                assert!(spelled == truth, "{what}: truths differ");
                let resolve = |r: &[crate::sink::Recon]| -> Vec<ReconThread> {
                    r.iter().map(|r| r.resolve(&detail.names)).collect()
                };
                assert!(
                    same_threads(&resolve(&detail.recon.0), &l),
                    "{what}: legacy stacks"
                );
                assert!(
                    same_threads(&resolve(&detail.recon.1), &g),
                    "{what}: segments stacks"
                );
            }
            old_recon.push((l, g));
        }
        let old_identical = same_threads(&old_recon[0].0, &old_recon[1].0)
            && same_threads(&old_recon[0].1, &old_recon[1].1);
        assert_eq!(
            new.paths_identical(),
            old_identical,
            "{what}: paths identical"
        );
    }

    #[test]
    fn interned_streaming_pipeline_agrees_with_the_string_one_on_simulated_recordings() {
        if !ptsim::testing::tools_available(&["qemu-x86_64", "perf", "cc"]) {
            return;
        }
        let tmp = ptsim::testing::scratch_dir("groundtruth-oracle").expect("scratch dir");
        // Built here: a call tree and threads, every variant (snapshots, decode errors).
        for (name, file, src, cc) in programs::PROGRAMS.iter().take(2) {
            let dir = tmp.path().join(name);
            std::fs::create_dir_all(&dir).expect("program directory");
            let exe = ptsim::testing::compile(&dir, name, file, src, cc).expect("compiles");
            let prog = sim::SimProgram::record(name, &dir, &[&exe]).expect("records");
            for (variant, cfg) in sim::variants(8192, prog.main_steps) {
                same_on_recording(&prog, variant, &cfg);
            }
        }
        // Debian's gzip (stripped: per-address names, legacy's phantoms), with faults.
        if std::path::Path::new("/usr/bin/gzip").is_file() {
            let dir = tmp.path().join("gzip");
            std::fs::create_dir_all(&dir).expect("gzip directory");
            let input = dir.join("in.txt");
            let text: String = (0..600).map(|i| format!("word{} ", i % 37)).collect();
            std::fs::write(&input, text).expect("input");
            let argv = [
                std::path::Path::new("/usr/bin/gzip"),
                std::path::Path::new("-k"),
                &input,
            ];
            let prog = sim::SimProgram::record("gzip", &dir, &argv).expect("records gzip");
            for (variant, cfg) in sim::variants(8192, prog.main_steps) {
                if variant == "full" || variant == "faults" {
                    same_on_recording(&prog, variant, &cfg);
                }
            }
        }
    }
}
