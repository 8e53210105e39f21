//! Scoring the whole pipeline on simulated Intel PT: a real program recorded by `ptsim`
//! (a genuine PT `perf.data` plus the true stacks), decoded by ptscope through `perf
//! script` text and through the dlfilter, fed to each stack writer, scored against the
//! truth.
//!
//! The truth is on *perf's clock*: each true step takes the time perf prints for its
//! branch (`docs/simulation.md`: with PT timing perf's time for a branch can be a little
//! after it, or before it, so the true instants would break the scorer's assumption that
//! a stack change lies in `[timestamp, next timestamp)`). Unlike
//! `ptsim::stacks::perf_clock_times`, the alignment here also handles decode-error gaps:
//! every branch perf reports is matched to the step that ran it through ptsim's
//! expectation, and the steps between two reported branches (lost in a gap, or not
//! reported such as not-taken conditionals) get times interpolated on the true clock.

use crate::gen::ThreadTruth;
use crate::names::{Names, StackBuilder, StackId};
use crate::score::{score_interned, Fidelity, Truth};
use crate::sink::{Recon, ReconThread, TimelineSink};
use anyhow::{bail, Context, Result};
use ptscope_event::{Event, EventData, Kind, ProcessStart, StringTable, Symbol, Thread};
use ptscope_pipeline::{DecodeOptions, DecoderKind, Input, Quiet};
use ptscope_stacks::legacy::LegacyWriter;
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::{StackWriter, WriterConfig};
use ptscope_symbols::{Mappings, Namer};
use ptsim::blocklog::BlockLog;
use ptsim::expected::{Branch, BranchKind, ThreadExpectation};
use ptsim::perfscript::Symbols;
use ptsim::stacks::{Replay, StackTimeline};
use ptsim::truth::{StepKind, ThreadTrace};
use ptsim::{SimConfig, Simulation};
use rustc_hash::FxHashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

/// How ptscope reads a `perf.data`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodePath {
    /// `perf script` text, parsed by `ptscope_decode`.
    Text,
    /// perf with ptscope's dlfilter (binary records).
    Dlfilter,
    /// ptscope's own Intel PT decoder (no perf), as `ptscope decode` does by default.
    Builtin,
}

/// A decoded recording: the events in perf's order and the names they refer to.
pub struct Decoded {
    /// Events, as the decoder produced them.
    pub events: Vec<Event>,
    /// Their string table.
    pub strings: StringTable,
}

/// Decodes an Intel PT `perf.data` the way `ptscope decode` does through `path`.
pub fn decode(perf_data: &Path, path: DecodePath) -> Result<Decoded> {
    let mut events = Vec::new();
    let strings = decode_each(perf_data, path, |e, _| events.push(e))?;
    Ok(Decoded { events, strings })
}

/// Decodes like [`decode`] but hands each event to `f` as it comes (with the names so
/// far) instead of keeping them: a recording of millions of events is never held.
/// The events are the decode pipeline's ([`ptscope_pipeline::for_each_event`]): the
/// same sources, set up the same way, and the same naming step `ptscope decode` runs
/// before its writers. Names are perf's, not demangled, as the truth's are. Returns the
/// names of every event.
pub fn decode_each(
    perf_data: &Path,
    path: DecodePath,
    f: impl FnMut(Event, &StringTable),
) -> Result<StringTable> {
    decode_each_with_entries(perf_data, path, f).map(|(strings, _)| strings)
}

/// [`decode_each`], also returning where each process entered its program (the
/// pipeline's [`ptscope_pipeline::Report::process_starts`], for the writers as
/// `ptscope decode` gives them).
fn decode_each_with_entries(
    perf_data: &Path,
    path: DecodePath,
    mut f: impl FnMut(Event, &StringTable),
) -> Result<(StringTable, Vec<(u32, ProcessStart)>)> {
    let mut options = DecodeOptions::new(Input::Recording(perf_data.to_path_buf()));
    options.decoder = match path {
        DecodePath::Text => DecoderKind::Text,
        DecodePath::Dlfilter => DecoderKind::Dlfilter,
        DecodePath::Builtin => DecoderKind::Builtin,
    };
    options.demangle = false;
    let (strings, report) =
        ptscope_pipeline::for_each_event(&options, &Quiet, |e, strings| f(e, strings))?;
    if let Some(why) = report.incomplete.first() {
        bail!("decoding {} failed: {why}", perf_data.display());
    }
    Ok((strings, report.process_starts))
}

/// The naming step `ptscope decode` runs between decoding and its writers, for the
/// recording at `perf_data`: code perf has no symbol for is named per function (a debug
/// file's symbol, else the `.eh_frame` FDE holding it) instead of per address.
fn namer(perf_data: &Path) -> Namer {
    let mut n = Namer::new(true, true);
    n.set_mappings(Mappings::read(perf_data).ok());
    n
}

/// Names the true stacks' code without symbols as the naming step names the trace's.
///
/// ptsim names a frame in such code after the address it was entered at,
/// `[unknown @ ADDR (DSO)]`; the trace names the function holding an address. The
/// truth's entry lies in the function it names, so renaming it after that function
/// gives the name the trace shows for the same frame. Neighbouring pieces whose stacks
/// became equal (two addresses in one function) are merged, so pieces still differ from
/// their neighbours as ptsim's do.
pub(crate) fn name_truth(timelines: &mut [StackTimeline], perf_data: &Path, pid: u32) {
    let mut rename = TruthNamer::new(perf_data, pid);
    let mut renamed: FxHashMap<String, Option<String>> = FxHashMap::default();
    for tl in timelines {
        for piece in &mut tl.pieces {
            for name in &mut piece.2 {
                let new = renamed
                    .entry(name.clone())
                    .or_insert_with(|| rename.name(name));
                if let Some(new) = new {
                    name.clone_from(new);
                }
            }
        }
        tl.pieces.dedup_by(|next, kept| {
            let joined = kept.2 == next.2 && kept.1 == next.0;
            if joined {
                kept.1 = next.1;
            }
            joined
        });
    }
}

/// What the naming step calls a frame of ptsim's true stacks, for the recording of
/// process `pid` at a given `perf.data`.
struct TruthNamer {
    namer: Namer,
    strings: StringTable,
    pid: u32,
}

impl TruthNamer {
    /// The naming step for the recording `perf_data` of process `pid`.
    fn new(perf_data: &Path, pid: u32) -> Self {
        TruthNamer {
            namer: namer(perf_data),
            strings: StringTable::new(),
            pid,
        }
    }

    /// The name the trace gives the frame ptsim calls `name`, if it is not `name`
    /// (only per-address names of code without symbols are renamed).
    fn name(&mut self, name: &str) -> Option<String> {
        if !name.starts_with("[unknown @ 0x") {
            return None;
        }
        let (ip, dso) = parse_unknown(name)?;
        let dso = self.strings.intern(dso);
        let (f, _) = self
            .namer
            .function_at_address(Some(self.pid), dso, ip, &mut self.strings)?;
        Some(self.strings.get(f).to_string())
    }
}

/// The address and DSO of a `[unknown @ 0xADDR (DSO)]` name.
fn parse_unknown(name: &str) -> Option<(u64, &str)> {
    let rest = name.strip_prefix("[unknown @ 0x")?.strip_suffix(")]")?;
    let (hex, dso) = rest.split_once(" (")?;
    Some((u64::from_str_radix(hex, 16).ok()?, dso))
}

/// Whether a step is a branch perf reports (everything but a not-taken conditional).
fn reported_kind(k: StepKind) -> bool {
    !matches!(k, StepKind::Jcc { taken: false })
}

/// Scored times are in units of 1/`SCALE` ns: perf prints nanoseconds, and dozens of
/// branches can share one, so spreading them on a nanosecond grid would drop short true
/// frames (a call and its return at the same instant) from the truth. The score is a ratio
/// of durations, so the unit does not change it.
pub const SCALE: u64 = 1000;

/// Expected branches perf may leave out before alignment gives up.
const MAX_SKIPPED: usize = 8;

/// Perf-clock times, in 1/[`SCALE`] ns, for every step of `t`, given ptsim's expectation `exp` for the thread
/// and the branches perf reported for it (`mine`, which must match `exp` one for one).
pub fn perf_clock_times(
    t: &ThreadTrace,
    exp: &ThreadExpectation,
    mine: &[Branch],
    ns: &dyn Fn(u64) -> u64,
) -> Result<Vec<u64>> {
    let mut a = Aligner::new(t, exp, ns);
    for r in mine {
        a.feed(r)?;
    }
    a.finish()
}

/// [`perf_clock_times`] fed one reported branch at a time, so perf's output for a
/// recording of millions of branches is never held. Nothing is kept per branch either:
/// each reported branch that is a true step (an anchor) fixes the times of the steps
/// since the previous one as it arrives.
pub struct Aligner<'a> {
    t: &'a ThreadTrace,
    /// ptsim's expectation; entries of kind `Uncertain` are passed over.
    exp: &'a [Branch],
    ns: &'a dyn Fn(u64) -> u64,
    /// The time of every step (filled up to the last anchor).
    times: Vec<u64>,
    /// The first anchor (step index, perf time).
    first: Option<(usize, u64)>,
    /// The last anchor, with perf's time as reported.
    last: Option<(usize, u64)>,
    /// No step is timed before this (the last anchor's time, as placed).
    floor: u64,
    /// The next step to look at.
    j: usize,
    /// The next expected branch (never an `Uncertain` one).
    w: usize,
    /// Expected branches passed over so far.
    skipped: usize,
}

impl<'a> Aligner<'a> {
    /// An aligner for thread `t` with ptsim's expectation `exp`; `ns` converts clocks.
    pub fn new(t: &'a ThreadTrace, exp: &'a ThreadExpectation, ns: &'a dyn Fn(u64) -> u64) -> Self {
        let mut a = Aligner {
            t,
            exp: &exp.branches,
            ns,
            times: vec![0u64; t.steps.len()],
            first: None,
            last: None,
            floor: 0,
            j: 0,
            w: 0,
            skipped: 0,
        };
        a.w = a.wanted(0);
        a
    }

    /// The first expected branch perf reports at or after index `from`.
    fn wanted(&self, from: usize) -> usize {
        let rest = self.exp.get(from..).unwrap_or(&[]);
        from + rest
            .iter()
            .position(|b| b.kind != BranchKind::Uncertain)
            .unwrap_or(rest.len())
    }

    fn clock(&self, i: usize) -> u64 {
        (self.ns)(self.t.steps[i].clock) * SCALE
    }

    /// Takes the thread's next reported branch `r`.
    pub fn feed(&mut self, r: &Branch) -> Result<()> {
        let (t, exp, ns) = (self.t, self.exp, self.ns);
        // perf reports what the simulation expects, one for one (ptsim's tests check it); a
        // few expected entries perf leaves out (seen at a snapshot's first fault) are skipped.
        // perf's error codes and times are its own; an error matches by kind.
        let matches = |e: &Branch| {
            if e.kind == BranchKind::Error {
                r.kind == BranchKind::Error
            } else {
                (e.kind, e.from, e.to) == (r.kind, r.from, r.to)
            }
        };
        while self.w < exp.len() && !matches(&exp[self.w]) && self.skipped < MAX_SKIPPED {
            self.w = self.wanted(self.w + 1);
            self.skipped += 1;
        }
        let Some(e) = exp.get(self.w).filter(|e| matches(e)) else {
            bail!(
                "thread {}: perf reported {r:?}, not among the next expected branches",
                t.tid
            );
        };
        self.w = self.wanted(self.w + 1);
        if e.kind == BranchKind::Error {
            return Ok(());
        }
        // Expected times are true times, so the step is found by time; the search stops
        // once past it (a `tr strt` perf synthesises after an overflow is no step).
        let mut k = self.j;
        while let Some(s) = t.steps.get(k) {
            let at = ns(s.clock);
            if at > e.time {
                break;
            }
            if at == e.time && s.from == e.from && s.to == e.to && reported_kind(s.kind) {
                self.anchor(k, r.time * SCALE);
                self.j = k + 1;
                break;
            }
            k += 1;
        }
        Ok(())
    }

    /// Times the steps up to the anchor `(ib, tb)`: before the first anchor (a snapshot's
    /// unseen past) true durations are kept; between two, true clocks are mapped linearly
    /// onto perf's.
    fn anchor(&mut self, ib: usize, tb: u64) {
        let Some((ia, ta)) = self.last else {
            let c = self.clock(ib);
            for i in 0..=ib {
                self.times[i] = tb.saturating_sub(c - self.clock(i));
            }
            self.first = Some((ib, tb));
            self.last = Some((ib, tb));
            self.floor = tb;
            return;
        };
        let placed = tb.max(self.floor);
        let (ca, cb) = (self.clock(ia), self.clock(ib));
        for i in ia + 1..ib {
            self.times[i] = if cb > ca {
                ta + (placed - ta.min(placed)) * (self.clock(i) - ca) / (cb - ca)
            } else {
                placed
            };
        }
        self.times[ib] = placed;
        self.floor = placed;
        self.last = Some((ib, tb));
    }

    /// The time of every step, from the branches fed.
    pub fn finish(self) -> Result<Vec<u64>> {
        let t = self.t;
        let (Some(_), Some((last, t_last))) = (self.first, self.last) else {
            bail!("thread {}: no reported branch is a step", t.tid);
        };
        // After the last anchor, true durations are kept.
        let t_last = t_last.max(self.floor);
        let c = self.clock(last);
        let mut times = self.times;
        for (i, x) in times.iter_mut().enumerate().skip(last) {
            *x = t_last + ((self.ns)(t.steps[i].clock) * SCALE - c);
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
}

/// The true stacks of every thread of `sim` on perf's clock (in 1/[`SCALE`] ns), for the recording whose
/// perf decode is `reported`; `syms` names functions (from a full recording).
pub fn perf_clock_stacks(
    sim: &Simulation,
    syms: &Symbols,
    reported: &[Branch],
) -> Result<Vec<StackTimeline>> {
    let ns = |c| sim.ns(c);
    let dso = |a: u64| sim.dso_at(a);
    let mut out = Vec::with_capacity(sim.traces.len());
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
        out.push(ptsim::stacks::timeline_at(t, &times, syms, &dso));
    }
    Ok(out)
}

/// A thread's true stacks on perf's clock with interned stacks ([`StackTimeline`] in a
/// few bytes per piece).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InternedTimeline {
    /// Thread id.
    pub tid: u32,
    /// Contiguous pieces `(start, end, stack)` of positive length.
    pub pieces: Vec<(u64, u64, StackId)>,
}

/// [`perf_clock_stacks`] with stacks interned in `names`, reading perf's branches for
/// the recording `perf_data` as perf prints them (none is kept: each goes to its
/// thread's [`Aligner`]).
pub fn perf_clock_stacks_interned(
    sim: &Simulation,
    syms: &Symbols,
    perf_data: &Path,
    names: &mut Names,
) -> Result<Vec<InternedTimeline>> {
    let ns = |c| sim.ns(c);
    let dso = |a: u64| sim.dso_at(a);
    // (trace, its aligner, branches fed)
    let mut threads: Vec<(&ThreadTrace, Aligner<'_>, usize)> = sim
        .traces
        .iter()
        .filter_map(|t| {
            let exp = sim.expected.iter().find(|e| e.tid == t.tid)?;
            Some((t, Aligner::new(t, exp, &ns), 0))
        })
        .collect();
    each_reported(perf_data, |b| {
        for (t, a, fed) in threads.iter_mut().filter(|x| x.0.tid == b.tid) {
            *fed += 1;
            let _ = t;
            a.feed(&b)?;
        }
        Ok(())
    })?;
    // Frames of code without symbols are named as the naming step names the trace's
    // (see [`name_truth`]), once per distinct name for the whole recording.
    let mut rename = TruthNamer::new(perf_data, sim.recording.pid);
    let mut builder = StackBuilder::renaming(|name| rename.name(name));
    let mut out = Vec::with_capacity(threads.len());
    for (t, a, fed) in threads {
        if fed == 0 {
            continue;
        }
        let times = a.finish()?;
        out.push(timeline_interned(
            t,
            &times,
            syms,
            &dso,
            names,
            &mut builder,
        ));
    }
    Ok(out)
}

/// The true stacks of every thread of `sim` at their true times (in 1/[`SCALE`] ns):
/// each step at the instant it ran, as ptscope's own decoder times branches (exactly,
/// on a simulated trace). Frames without symbols are named as in
/// [`perf_clock_stacks_interned`].
pub fn true_time_stacks_interned(
    sim: &Simulation,
    syms: &Symbols,
    perf_data: &Path,
    names: &mut Names,
) -> Vec<InternedTimeline> {
    let dso = |a: u64| sim.dso_at(a);
    let mut rename = TruthNamer::new(perf_data, sim.recording.pid);
    let mut builder = StackBuilder::renaming(|name| rename.name(name));
    let mut out = Vec::with_capacity(sim.traces.len());
    for t in &sim.traces {
        if !sim
            .expected
            .iter()
            .any(|e| e.tid == t.tid && !e.branches.is_empty())
        {
            continue;
        }
        let times: Vec<u64> = t.steps.iter().map(|s| sim.ns(s.clock) * SCALE).collect();
        out.push(timeline_interned(
            t,
            &times,
            syms,
            &dso,
            names,
            &mut builder,
        ));
    }
    out
}

/// Runs perf's decoder on `perf_data` as `ptsim::perfscript::decode` does and hands each
/// branch it reports to `f`, parsing its output line by line instead of holding it (a
/// 20 M-branch recording prints over a gigabyte).
pub fn each_reported(perf_data: &Path, mut f: impl FnMut(Branch) -> Result<()>) -> Result<()> {
    use std::io::{BufRead, Read};
    use std::process::{Command, Stdio};
    let mut child = Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(perf_data)
        .args(["--ns", "--itrace=be", "-F", "tid,time,flags,ip,addr"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run perf (Debian package linux-perf)")?;
    // Drained aside: perf would block on a full stderr pipe while we wait on stdout.
    let stderr = child.stderr.take();
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut e) = stderr {
            let _ = e.read_to_string(&mut text);
        }
        text
    });
    let mut read = || -> Result<()> {
        let stdout = child
            .stdout
            .take()
            .context("perf script has no output pipe")?;
        let mut lines = std::io::BufReader::new(stdout);
        let mut buf = Vec::new();
        let mut n = 0usize;
        loop {
            buf.clear();
            if lines
                .read_until(b'\n', &mut buf)
                .context("cannot read perf script's output")?
                == 0
            {
                return Ok(());
            }
            n += 1;
            let line = String::from_utf8_lossy(&buf);
            let parsed = ptsim::perfscript::parse(&line)
                .with_context(|| format!("perf script output line {n}"))?;
            for b in parsed {
                f(b)?;
            }
        }
    };
    let result = read();
    if result.is_err() {
        // Nothing more is read: stop perf rather than let it block on a full pipe.
        let _ = child.kill();
    }
    let status = child.wait().context("cannot wait for perf script")?;
    let stderr = errors.join().unwrap_or_default();
    result?;
    if !status.success() {
        bail!(
            "perf script could not decode {} ({status}): {} (is it an Intel PT perf.data \
             this perf can read? `perf script -i FILE` shows the same)",
            perf_data.display(),
            stderr.trim()
        );
    }
    Ok(())
}

/// `ptsim::stacks::timeline_at` with interned stacks: the same pieces, each step's
/// stack compared by handle instead of as a vector of names (named by `builder`).
fn timeline_interned(
    t: &ThreadTrace,
    times: &[u64],
    syms: &Symbols,
    dso: ptsim::stacks::DsoOf<'_>,
    names: &mut Names,
    builder: &mut StackBuilder<'_>,
) -> InternedTimeline {
    let mut replay = Replay::new(syms, dso);
    let mut pieces: Vec<(u64, u64, StackId)> = Vec::new();
    // Neighbours that end up equal after zero-length pieces are dropped are merged.
    let mut push = |p: (u64, u64, StackId)| match pieces.last_mut() {
        Some(m) if m.2 == p.2 && m.1 == p.0 => m.1 = p.1,
        _ => pieces.push(p),
    };
    let mut last: Option<(u64, StackId)> = None;
    for (i, s) in t.steps.iter().enumerate() {
        let now = times.get(i).copied().unwrap_or(0);
        replay.apply(s);
        let stack = builder.intern(names, replay.names_iter());
        match last {
            Some((_, prev)) if prev == stack => {}
            _ => {
                if let Some((start, prev)) = last.take() {
                    if now > start {
                        push((start, now, prev));
                    }
                }
                last = Some((now, stack));
            }
        }
    }
    if let (Some((start, stack)), Some(&end)) = (last, times.get(t.steps.len().wrapping_sub(1))) {
        if end > start {
            push((start, end, stack));
        }
    }
    InternedTimeline { tid: t.tid, pieces }
}

/// What the scorer needs from one thread's events: the timestamp windows and the gaps,
/// collected one event at a time (see [`thread_truths`]).
#[derive(Default)]
struct EventWindows {
    windows: Vec<u64>,
    order_windows: Vec<u64>,
    gaps: Vec<(u64, u64)>,
    last: Option<u64>,
    open_gap: Option<u64>,
}

impl EventWindows {
    fn observe(&mut self, e: &Event, strings: &StringTable) {
        // A thread's name (perf's COMM and FORK side-band, printed for the task events)
        // is no trace of its stack: a snapshot's COMM from the exec long before the
        // buffer would stretch the scored span over time no writer saw.
        if matches!(
            e,
            Event::Ok {
                data: EventData::Comm { .. } | EventData::Fork { .. },
                ..
            }
        ) {
            return;
        }
        let Some(time) = e.time().map(|t| t * SCALE).or(self.last) else {
            return;
        };
        if let Some(g) = self.open_gap.take() {
            self.gaps.push((g, time.max(g)));
        }
        // Sorted and deduplicated at the end; repeats in a row are dropped now.
        if self.windows.last() != Some(&time) {
            self.windows.push(time);
        }
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
            } => same_symbol(strings.location(*src).symbol, strings.location(*dst).symbol),
            Event::Ok {
                data: EventData::Power { .. },
                ..
            } => true,
            _ => false,
        };
        if !local && self.order_windows.last() != Some(&time) {
            self.order_windows.push(time);
        }
        if matches!(e, Event::DecodeError { .. }) {
            self.open_gap = Some(time);
        }
        self.last = Some(time);
    }

    /// The sorted windows, order windows and gaps (`None` without a timed event).
    fn finish(mut self) -> Option<Windowed> {
        self.windows.sort_unstable();
        self.windows.dedup();
        self.order_windows.sort_unstable();
        self.order_windows.dedup();
        (!self.windows.is_empty()).then_some(Windowed {
            windows: self.windows,
            order_windows: self.order_windows,
            gaps: self.gaps,
        })
    }
}

/// One thread's finished [`EventWindows`].
struct Windowed {
    windows: Vec<u64>,
    order_windows: Vec<u64>,
    gaps: Vec<(u64, u64)>,
}

/// Every thread's [`EventWindows`], in the order threads first appear.
#[derive(Default)]
struct ThreadWindows {
    threads: Vec<(Thread, EventWindows)>,
    /// The last thread seen (events come in runs of one thread).
    at: usize,
}

impl ThreadWindows {
    fn observe(&mut self, e: &Event, strings: &StringTable) {
        let th = e.thread();
        if self.threads.get(self.at).is_none_or(|t| t.0 != th) {
            self.at = match self.threads.iter().position(|t| t.0 == th) {
                Some(i) => i,
                None => {
                    self.threads.push((th, EventWindows::default()));
                    self.threads.len() - 1
                }
            };
        }
        self.threads[self.at].1.observe(e, strings);
    }

    /// Per thread with a true timeline: the timeline clipped to the thread's events, with
    /// their windows (`timeline_of` gives a thread's pieces and how to clip them).
    fn truths<S, T>(
        self,
        mut timeline_of: impl FnMut(Thread, u64, u64) -> Option<Vec<(u64, u64, S)>>,
        mut make: impl FnMut(Thread, Vec<(u64, u64, S)>, Windowed) -> T,
    ) -> Vec<T> {
        let mut out = Vec::new();
        for (th, w) in self.threads {
            let Some(w) = w.finish() else {
                continue;
            };
            let (lo, hi) = (w.windows[0], w.windows[w.windows.len() - 1]);
            let Some(timeline) = timeline_of(th, lo, hi) else {
                continue;
            };
            if timeline.is_empty() {
                continue;
            }
            out.push(make(th, timeline, w));
        }
        out
    }
}

/// The pieces of `pieces` overlapping `[lo, hi]`, clipped to it.
fn clip<S: Clone>(pieces: &[(u64, u64, S)], lo: u64, hi: u64) -> Vec<(u64, u64, S)> {
    pieces
        .iter()
        .filter(|p| p.1 > lo && p.0 < hi)
        .map(|p| (p.0.max(lo), p.1.min(hi), p.2.clone()))
        .collect()
}

/// The scored truth for a decoded recording: per thread, the perf-clock timeline clipped
/// to the thread's first..last decoded event, with windows taken from the events.
///
/// `windows` are the distinct event times; `order_windows` leave out jumps within one
/// symbol and power events (they change no stack); a gap runs from a decode error to the
/// thread's next event.
pub fn thread_truths(timelines: &[StackTimeline], d: &Decoded) -> Vec<ThreadTruth> {
    let mut w = ThreadWindows::default();
    for e in &d.events {
        w.observe(e, &d.strings);
    }
    w.truths(
        |th, lo, hi| {
            let tl = timelines.iter().find(|t| Some(t.tid) == th.tid)?;
            Some(clip(&tl.pieces, lo, hi))
        },
        |thread, timeline, w| ThreadTruth {
            thread,
            timeline,
            windows: w.windows,
            order_windows: w.order_windows,
            gaps: w.gaps,
        },
    )
}

fn same_symbol(a: Symbol, b: Symbol) -> bool {
    match (a, b) {
        (Symbol::FromPerf(x), Symbol::FromPerf(y)) => x == y,
        _ => false,
    }
}

/// Runs decoded events through a writer as `ptscope decode` does (times relative to the
/// first event) and returns the per-thread stacks on the events' clock, in 1/[`SCALE`] ns.
pub fn reconstruct_decoded<W, F>(d: &Decoded, make_writer: F) -> Vec<ReconThread>
where
    W: ptscope_stacks::StackWriter<TimelineSink>,
    F: FnOnce(TimelineSink, u64) -> W,
{
    let earliest = d.events.iter().find_map(Event::time).unwrap_or(0);
    let mut threads = crate::reconstruct_events(&d.events, &d.strings, earliest, make_writer);
    let k = SCALE as i64;
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

/// The legacy writer as the CLI configures it for a user-only trace starting at `earliest`.
pub fn legacy(sink: TimelineSink, earliest: u64) -> LegacyWriter<TimelineSink> {
    LegacyWriter::new(
        sink,
        WriterConfig {
            earliest_time: earliest,
            ..WriterConfig::default()
        },
    )
}

/// The segments writer as the CLI configures it for a user-only trace.
pub fn segments(sink: TimelineSink, earliest: u64) -> SegmentsWriter<TimelineSink> {
    segments_timed(sink, earliest, false)
}

/// [`segments`] without [`WriterConfig::mark_unknown_frames`]: frames carried across a
/// decode error that nothing later proves are shown, guessed to have survived.
pub fn segments_guessing(sink: TimelineSink, earliest: u64) -> SegmentsWriter<TimelineSink> {
    SegmentsWriter::new(
        sink,
        WriterConfig {
            earliest_time: earliest,
            mark_unknown_frames: false,
            ..WriterConfig::default()
        },
    )
}

/// [`segments`] with [`WriterConfig::mark_unknown_frames`] (the default, explicit here):
/// frames carried across a decode error that nothing later proves give way to the
/// marker frame.
pub fn segments_marked(sink: TimelineSink, earliest: u64) -> SegmentsWriter<TimelineSink> {
    SegmentsWriter::new(
        sink,
        WriterConfig {
            earliest_time: earliest,
            mark_unknown_frames: true,
            ..WriterConfig::default()
        },
    )
}

/// [`segments`] for a decoder whose events are exactly timed (`WriterConfig::exact_times`:
/// ptscope's own, as the pipeline configures it from what the source says).
pub fn segments_timed(
    sink: TimelineSink,
    earliest: u64,
    exact_times: bool,
) -> SegmentsWriter<TimelineSink> {
    SegmentsWriter::new(
        sink,
        WriterConfig {
            earliest_time: earliest,
            exact_times,
            ..WriterConfig::default()
        },
    )
}

/// One decode path's result on one recording.
#[derive(Clone, Debug)]
pub struct PathScore {
    /// Events decoded.
    pub events: usize,
    /// Decode errors among them.
    pub errors: usize,
    /// Threads scored (with events and a true timeline).
    pub threads: usize,
    /// The legacy writer's score.
    pub legacy: Fidelity,
    /// The segments writer's score.
    pub segments: Fidelity,
}

/// Both writers fed from one event stream. Writers take the first event's time at
/// construction, so events before the first timed one wait in `pending`.
struct Writers {
    pending: Vec<Event>,
    earliest: u64,
    exact_times: bool,
    both: Option<(LegacyWriter<TimelineSink>, SegmentsWriter<TimelineSink>)>,
}

impl Writers {
    fn new(exact_times: bool) -> Self {
        Writers {
            pending: Vec::new(),
            earliest: 0,
            exact_times,
            both: None,
        }
    }

    fn start(&mut self, earliest: u64, strings: &StringTable) {
        let (mut l, mut s) = (
            legacy(TimelineSink::new(), earliest),
            segments_timed(TimelineSink::new(), earliest, self.exact_times),
        );
        for e in self.pending.drain(..) {
            l.write_event(&e, strings);
            s.write_event(&e, strings);
        }
        self.earliest = earliest;
        self.both = Some((l, s));
    }

    fn write(&mut self, e: Event, strings: &StringTable) {
        if self.both.is_none() {
            match e.time() {
                Some(t) => self.start(t, strings),
                None => return self.pending.push(e),
            }
        }
        if let Some((l, s)) = &mut self.both {
            l.write_event(&e, strings);
            s.write_event(&e, strings);
        }
    }

    /// Both writers' finished sinks (legacy, segments), and the time their relative
    /// times count from.
    fn finish(
        mut self,
        strings: &StringTable,
        entries: &[(u32, ProcessStart)],
    ) -> Option<(TimelineSink, TimelineSink, u64)> {
        if self.both.is_none() {
            self.start(0, strings);
        }
        let (mut l, mut s) = self.both?;
        for &(pid, start) in entries {
            l.set_process_start(pid, start);
            s.set_process_start(pid, start);
        }
        Some((l.finish(strings), s.finish(strings), self.earliest))
    }
}

/// One writer's stacks scored: the score, a digest of the stacks (to compare paths
/// without keeping both), and the stacks themselves when asked for.
struct WriterRun {
    score: Fidelity,
    digest: u64,
    recon: Option<Vec<Recon>>,
}

/// Replays `sink` (times relative to `earliest`) onto the scorer's clock, scores it
/// against `truth` and keeps the stacks if `keep`.
fn score_writer(
    sink: TimelineSink,
    earliest: u64,
    truth: &[Truth],
    names: &mut Names,
    keep: bool,
) -> WriterRun {
    let mut recon = sink.into_recon(names);
    for t in &mut recon {
        t.shift(earliest as i64, SCALE as i64);
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    recon.hash(&mut h);
    WriterRun {
        score: unscale(score_interned(truth, &recon, names)),
        digest: h.finish(),
        recon: keep.then_some(recon),
    }
}

/// What [`score_path`] scored: the figures, digests of both writers' stacks (legacy,
/// segments), and with `keep` the truth and the stacks.
struct PathRun {
    score: PathScore,
    digests: (u64, u64),
    /// A digest of the events without their times, per thread in thread order
    /// ([`event_key`]): what two decoders must agree on.
    events: u64,
    truth: Option<Vec<Truth>>,
    recon: Option<(Vec<Recon>, Vec<Recon>)>,
}

/// Decodes `data` through `path`, streaming each event to both writers and to the
/// window collector, and scores both writers against `timelines`, one after the other
/// (one writer's stacks are dropped before the next is replayed, unless `keep`).
fn score_path(
    timelines: &[InternedTimeline],
    data: &Path,
    path: DecodePath,
    names: &mut Names,
    keep: bool,
) -> Result<PathRun> {
    let mut writers = Writers::new(path == DecodePath::Builtin);
    let mut windows = ThreadWindows::default();
    let (mut events, mut errors) = (0usize, 0usize);
    let mut keys: FxHashMap<Thread, std::collections::hash_map::DefaultHasher> =
        FxHashMap::default();
    // `SIM_EVENT_KEYS=DIR`: each path's event keys go to `DIR/<path>.keys`, to diff.
    let mut dump = std::env::var_os("SIM_EVENT_KEYS").and_then(|d| {
        std::fs::File::create(Path::new(&d).join(format!("{path:?}.keys")))
            .ok()
            .map(std::io::BufWriter::new)
    });
    let (strings, entries) = decode_each_with_entries(data, path, |e, strings| {
        events += 1;
        errors += usize::from(matches!(e, Event::DecodeError { .. }));
        if let Some(k) = event_key(&e, strings) {
            if let Some(d) = dump.as_mut() {
                use std::io::Write;
                let _ = writeln!(d, "{:?} {k}", e.thread().tid);
            }
            k.hash(keys.entry(e.thread()).or_default());
        }
        windows.observe(&e, strings);
        writers.write(e, strings);
    })?;
    let mut per_thread: Vec<(Thread, u64)> =
        keys.into_iter().map(|(t, h)| (t, h.finish())).collect();
    per_thread.sort();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    per_thread.hash(&mut h);
    let events_digest = h.finish();
    let truth = windows.truths(
        |th, lo, hi| {
            let tl = timelines.iter().find(|t| Some(t.tid) == th.tid)?;
            Some(clip(&tl.pieces, lo, hi))
        },
        |thread, timeline, w| Truth {
            thread,
            timeline,
            windows: w.windows,
            order_windows: w.order_windows,
            gaps: w.gaps,
        },
    );
    let (l, s, earliest) = writers
        .finish(&strings, &entries)
        .context("the writers were never started")?;
    let s = score_writer(s, earliest, &truth, names, keep);
    let l = score_writer(l, earliest, &truth, names, keep);
    let score = PathScore {
        events,
        errors,
        threads: truth.len(),
        legacy: l.score,
        segments: s.score,
    };
    Ok(PathRun {
        score,
        digests: (l.digest, s.digest),
        events: events_digest,
        truth: keep.then_some(truth),
        recon: l.recon.zip(s.recon),
    })
}

/// A name made of the file's name and an offset (`libc.so.6+0x26360`): no symbol.
fn no_symbol(name: &str) -> bool {
    name.rsplit_once("+0x").is_some_and(|(file, hex)| {
        !file.is_empty()
            && !file.contains([' ', '(', '<'])
            && !hex.is_empty()
            && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// What of an event two decoders must agree on, all but its time: branches by kind,
/// trace start or end, both ends' addresses and names, decode errors by position (their
/// words differ), side band. PLT code is named by address only: ptscope's decoder names
/// a stub `NAME@plt` and the PLT's header nothing, perf 6.1 both after the sizeless
/// symbol before `.plt` (`_init`, or `_fini` where `.plt` follows `.fini`, as in rustc's
/// executables). `.plt.got` stubs are `NAME@plt` to ptscope and have no symbol to perf
/// 6.1, which names them by file and offset (`libc.so.6+0x26360`): code without a
/// symbol is compared by address too.
pub fn event_key(e: &Event, strings: &StringTable) -> Option<String> {
    let name = |h| {
        let l = strings.location(h);
        let n = strings.display(l.symbol);
        if n.ends_with("@plt")
            || n == "_init"
            || n == "_fini"
            || n.starts_with("[unknown @ ")
            || no_symbol(n)
        {
            format!("{:x} <plt stub>", l.ip)
        } else {
            format!("{:x} {n}+{:x}", l.ip, l.offset)
        }
    };
    Some(match e {
        Event::DecodeError { .. } => "error".to_string(),
        Event::Ok { data, .. } => match data {
            EventData::Trace {
                change,
                kind,
                src,
                dst,
            } => format!("{change:?} {kind:?} {} => {}", name(*src), name(*dst)),
            EventData::Comm { name, exec } => format!("comm {} {exec}", strings.get(*name)),
            EventData::Fork { parent } => format!("fork {parent:?}"),
            EventData::Power { .. } => return None,
            other => format!("{other:?}"),
        },
    })
}

/// Brings a score's durations and phantom times back to nanoseconds.
fn unscale(mut f: Fidelity) -> Fidelity {
    f.covered_ns /= SCALE;
    for p in &mut f.phantoms {
        p.start /= SCALE as i64;
        p.end /= SCALE as i64;
    }
    f
}

/// What [`SimProgram::score_detailed`] keeps beyond the figures: the text path's truth
/// and stacks, to look at mismatches ([`crate::score::mismatches_interned`]).
#[derive(Clone, Debug)]
pub struct Detail {
    /// The handles of `truth` and `recon`.
    pub names: Names,
    /// The truth the text path was scored against.
    pub truth: Vec<Truth>,
    /// The text path's stacks (legacy, segments).
    pub recon: (Vec<Recon>, Vec<Recon>),
}

/// One simulated recording scored through both decode paths.
#[derive(Clone, Debug)]
pub struct SimScore {
    /// Program name.
    pub program: String,
    /// Recording variant (full, snapshot, faults, …).
    pub variant: String,
    /// Through `perf script` text.
    pub text: PathScore,
    /// Through the dlfilter.
    pub dlfilter: PathScore,
    /// Through ptscope's own decoder.
    pub builtin: PathScore,
    /// The builtin decoder gave the dlfilter path's events (times aside: [`event_key`]).
    pub builtin_same_events: bool,
    /// Both paths rebuilt the same stacks and slices with both writers (compared by a
    /// 64-bit digest of each writer's stacks: neither path's stacks are kept).
    pub identical: bool,
    /// With [`SimProgram::score_detailed`]: the text path's truth and stacks.
    pub detail: Option<Detail>,
}

impl SimScore {
    /// The two paths rebuilt identical stacks with both writers (and so score the same).
    pub fn paths_identical(&self) -> bool {
        self.identical
    }
}

/// A program's execution under QEMU, from which variants are simulated.
pub struct SimProgram {
    /// Program name (for tables).
    pub name: String,
    /// Where its recordings go.
    pub dir: PathBuf,
    /// The block log of its one QEMU run.
    pub log: BlockLog,
    /// Function names, from perf's decode of the full recording.
    pub syms: Symbols,
    /// The command name perf records.
    pub comm: String,
    /// Steps of the main thread (to place faults).
    pub main_steps: usize,
    /// The main thread's step that enters `main` (0 if none does): faults placed after
    /// it land in the program's own work at the same place whatever the start-up's
    /// length (the loader's work grows with the environment's size).
    pub main_entry_step: usize,
    /// The main thread's step that jumps into the program's entry (ld.so's jump to
    /// `_start`; 0 if none is found): the one just before the entry's call of
    /// `__libc_start_main`, `_start` having no branch of its own before it.
    pub program_entry_step: usize,
    /// The main thread's step where glibc's `__libc_start_call_main` calls the program's
    /// `main` (its one indirect call; 0 if none is found): found by the caller, so
    /// also in a stripped program, where perf names `main` after the file.
    pub main_call_step: usize,
}

impl SimProgram {
    /// Runs `argv` once under QEMU with ptsim's plugin, in `dir`.
    pub fn record(name: &str, dir: &Path, argv: &[&Path]) -> Result<Self> {
        Self::record_with(name, dir, argv, &SimConfig::default())
    }

    /// [`SimProgram::record`] with `cfg` (e.g. `stack_log`: the same run logged in the
    /// plugin's stack mode too, as an emulate recording in `dir`).
    pub fn record_with(name: &str, dir: &Path, argv: &[&Path], cfg: &SimConfig) -> Result<Self> {
        let out = ptsim::testing::record(dir, argv, cfg)?;
        if !out.status.success() {
            bail!("{name} exited with {}", out.status);
        }
        let log = BlockLog::read(&dir.join("ptsim-blocks.log"))?;
        // A full fault-free recording names every function that ever ran, including
        // frames entered before a snapshot starts.
        let syms = Symbols::from_perf(&dir.join("perf.data"))?;
        let main_entry_step = out
            .sim
            .traces
            .first()
            .and_then(|t| {
                t.steps
                    .iter()
                    .position(|s| syms.function(s.to) == Some(("main", s.to)))
            })
            .unwrap_or(0);
        let program_entry_step = out
            .sim
            .traces
            .first()
            .and_then(|t| {
                t.steps.iter().position(|s| {
                    syms.function(s.to)
                        .is_some_and(|(f, at)| f.starts_with("__libc_start_main") && at == s.to)
                })
            })
            .map_or(0, |i| i.saturating_sub(1));
        let main_call_step = out
            .sim
            .traces
            .first()
            .and_then(|t| {
                t.steps.iter().position(|s| {
                    s.kind == ptsim::truth::StepKind::IndirectCall
                        && syms
                            .function(s.from)
                            .is_some_and(|(f, _)| f == "__libc_start_call_main")
                })
            })
            .unwrap_or(0);
        Ok(SimProgram {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            log,
            syms,
            comm: out.sim.recording.comm.clone(),
            main_steps: out.sim.traces.first().map_or(0, |t| t.steps.len()),
            main_entry_step,
            program_entry_step,
            main_call_step,
        })
    }

    /// 8 decode errors (4 overflows of 50 branches, 4 corrupt packets) spread over the main
    /// thread's steps from its entry into `main` on, where a program's own work (signals,
    /// unwinding) runs. Placed after `main`'s entry, not at a share of all steps: the
    /// loader's start-up grows with the environment, and a share of all steps landed on
    /// different code on every machine (in CI, on the loader's jump to the program).
    ///
    /// # Panics
    /// If the main thread never entered `main`.
    pub fn late_faults(&self) -> SimConfig {
        self.late_faults_at(0, 1)
    }

    /// [`SimProgram::late_faults`] with all 8 errors moved later by `placement /
    /// placements` of their spacing (11 % of the main thread's steps after `main`'s
    /// entry): `placements` of them put an error at every step of that span once, to
    /// sweep where a decode error can fall.
    ///
    /// # Panics
    /// If the main thread never entered `main`, or `placements` is 0.
    pub fn late_faults_at(&self, placement: usize, placements: usize) -> SimConfig {
        let (entry, end) = (self.main_entry_step, self.main_steps);
        assert!(
            entry > 0 && entry < end,
            "{}: no entry into main",
            self.name
        );
        let shift = (end - entry) * 11 * placement / (100 * placements);
        let at = |k: usize| entry + (end - entry) * (5 + 11 * k) / 100 + shift;
        SimConfig {
            main_faults: Some(ptsim::pt::Faults {
                overflows: (0..4).map(|k| (at(2 * k), 50)).collect(),
                corruptions: (0..4).map(|k| at(2 * k + 1)).collect(),
            }),
            ..SimConfig::default()
        }
    }

    /// Simulates the variant `cfg` into `dir/variant/perf.data`, builds its perf-clock
    /// truth, decodes it through both paths and scores both writers.
    ///
    /// Stacks are interned and events streamed: besides the truth (a handle per stack
    /// change), one writer's stacks are held at a time, never the events nor names.
    pub fn score(&self, variant: &str, cfg: &SimConfig) -> Result<SimScore> {
        self.score_with(variant, cfg, false)
    }

    /// [`SimProgram::score`], keeping the text path's truth and stacks
    /// ([`SimScore::detail`]) to look at where a writer goes wrong.
    pub fn score_detailed(&self, variant: &str, cfg: &SimConfig) -> Result<SimScore> {
        self.score_with(variant, cfg, true)
    }

    fn score_with(&self, variant: &str, cfg: &SimConfig, keep: bool) -> Result<SimScore> {
        let mut names = Names::new();
        let (timelines, true_time, data) = self.simulate_both(variant, cfg, &mut names)?;
        let text = score_path(&timelines, &data, DecodePath::Text, &mut names, keep)?;
        let dlfilter = score_path(&timelines, &data, DecodePath::Dlfilter, &mut names, false)?;
        drop(timelines);
        // ptscope's decoder times branches where they ran: it is scored against the
        // truth at true times (perf's paths against the truth moved to perf's clock,
        // which spares them their timing error).
        let debug_builtin = std::env::var_os("BUILTIN_DEBUG").is_some();
        let mut builtin = score_path(
            &true_time,
            &data,
            DecodePath::Builtin,
            &mut names,
            keep && debug_builtin,
        )?;
        let (text_truth, text_recon) = if keep && debug_builtin {
            (builtin.truth.take(), builtin.recon.take())
        } else {
            (text.truth, text.recon)
        };
        if std::env::var_os("BUILTIN_DEBUG").is_some() {
            let d = score_path(&true_time, &data, DecodePath::Dlfilter, &mut names, false)?;
            eprintln!(
                "  dlfilter on true time: segments exact {:.4}, phantoms {}",
                d.score.segments.exact, d.score.segments.phantom_frames
            );
            for p in d.score.segments.phantoms.iter().take(5) {
                eprintln!("  dlfilter true-time phantom {p:?}");
            }
        }
        drop(true_time);
        let detail = match (text_truth, text_recon) {
            (Some(truth), Some(recon)) => Some(Detail {
                names,
                truth,
                recon,
            }),
            _ => None,
        };
        Ok(SimScore {
            program: self.name.clone(),
            variant: variant.to_string(),
            identical: text.digests == dlfilter.digests,
            text: text.score,
            builtin_same_events: builtin.events == dlfilter.events,
            dlfilter: dlfilter.score,
            builtin: builtin.score,
            detail,
        })
    }

    /// [`SimProgram::simulate`] with the true stacks interned in `names`; the simulation
    /// and perf's branches are dropped before it returns.
    pub fn simulate_interned(
        &self,
        variant: &str,
        cfg: &SimConfig,
        names: &mut Names,
    ) -> Result<(Vec<InternedTimeline>, PathBuf)> {
        self.simulate_both(variant, cfg, names)
            .map(|(perf_clock, _, data)| (perf_clock, data))
    }

    /// [`SimProgram::simulate_interned`], with the true stacks also at their true times
    /// ([`true_time_stacks_interned`]): `(perf clock, true time, recording)`.
    pub fn simulate_both(
        &self,
        variant: &str,
        cfg: &SimConfig,
        names: &mut Names,
    ) -> Result<(Vec<InternedTimeline>, Vec<InternedTimeline>, PathBuf)> {
        let sub = self.dir.join(variant);
        std::fs::create_dir_all(&sub)?;
        let sim = ptsim::simulate(&self.log, &self.comm, cfg);
        let data = sub.join("perf.data");
        ptsim::write_outputs(&sim, &data, false)?;
        let timelines = perf_clock_stacks_interned(&sim, &self.syms, &data, names)
            .with_context(|| format!("{} {variant}: aligning perf's branches", self.name))?;
        let true_time = true_time_stacks_interned(&sim, &self.syms, &data, names);
        Ok((timelines, true_time, data))
    }

    /// Simulates the variant `cfg` into `dir/variant/perf.data` and returns the true
    /// stacks on perf's clock with the recording's path (what [`SimProgram::score`]
    /// scores; `fidelity --sim-explain` looks at one writer's mismatches with it).
    pub fn simulate(
        &self,
        variant: &str,
        cfg: &SimConfig,
    ) -> Result<(Vec<StackTimeline>, PathBuf)> {
        let sub = self.dir.join(variant);
        std::fs::create_dir_all(&sub)?;
        let sim = ptsim::simulate(&self.log, &self.comm, cfg);
        let data = sub.join("perf.data");
        ptsim::write_outputs(&sim, &data, false)?;
        let reported = ptsim::perfscript::decode(&data)?;
        let mut timelines = perf_clock_stacks(&sim, &self.syms, &reported)
            .with_context(|| format!("{} {variant}: aligning perf's branches", self.name))?;
        name_truth(&mut timelines, &data, sim.recording.pid);
        Ok((timelines, data))
    }
}

/// 8 decode errors in a recording (4 overflows of 50 branches and 4 corrupt packets),
/// spread over the main thread: the `faults` variant of the real-world corpus's programs
/// with signals and unwinding.
pub fn spread_faults() -> SimConfig {
    SimConfig {
        faults: ptsim::FaultSpec::parse("overflow=4,corrupt=4,overflow-len=50")
            .expect("valid faults"),
        ..SimConfig::default()
    }
}

/// The recording variants of the pipeline check: full, snapshot, faults, snapshot + faults.
///
/// Snapshots keep the last `snapshot` bytes of each thread's trace (PSBs every 1 KiB so a
/// small buffer holds several); faults are 2 overflows of 50 steps and 2 corrupt packets,
/// spread over the main thread (`main_steps` steps) or, with a snapshot, over the part the
/// buffer keeps (about a step per byte at ~1.6 bytes per reported branch: the last
/// `snapshot / 2` steps are safely inside).
pub fn variants(snapshot: usize, main_steps: usize) -> Vec<(&'static str, SimConfig)> {
    let mut snap = SimConfig {
        snapshot_size: Some(snapshot),
        ..SimConfig::default()
    };
    snap.pt.psb_period = 1024;
    let with_faults = SimConfig {
        faults: ptsim::FaultSpec::parse("overflow=2,corrupt=2,overflow-len=50")
            .expect("valid faults"),
        ..SimConfig::default()
    };
    let kept = (snapshot / 2).min(main_steps);
    let at = |k: usize| main_steps - kept + kept * k / 5;
    let snap_faults = SimConfig {
        main_faults: Some(ptsim::pt::Faults {
            overflows: vec![(at(1), 50), (at(3), 50)],
            corruptions: vec![at(2), at(4)],
        }),
        ..snap.clone()
    };
    vec![
        ("full", SimConfig::default()),
        ("snapshot", snap),
        ("faults", with_faults),
        ("snapshot+faults", snap_faults),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_failing_on_a_bad_file_is_an_error_that_says_why() {
        if !ptsim::testing::tools_available(&["perf"]) {
            return;
        }
        let dir = tempfile::tempdir().expect("temporary directory");
        let bad = dir.path().join("perf.data");
        std::fs::write(&bad, b"not a perf.data file").expect("write");
        let mut seen = 0;
        let err = each_reported(&bad, |_| {
            seen += 1;
            Ok(())
        })
        .expect_err("garbage is not a recording");
        assert_eq!(seen, 0);
        let msg = format!("{err:#}");
        eprintln!("{msg}");
        assert!(msg.contains("perf script could not decode"), "{msg}");
    }
}
