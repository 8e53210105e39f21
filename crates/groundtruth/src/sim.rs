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
use crate::score::{score, Fidelity};
use crate::sink::{ReconThread, TimelineSink};
use anyhow::{bail, Context, Result};
use ptscope_decode::{PerfScript, PerfScriptOptions, RecordingKind};
use ptscope_dlfilter_reader::{Choice, DlfilterOptions};
use ptscope_event::{Event, EventData, Kind, StringTable, Symbol, Thread};
use ptscope_stacks::legacy::{LegacyConfig, LegacyWriter};
use ptscope_stacks::segments::{SegmentsConfig, SegmentsWriter};
use ptscope_symbols::{Mappings, Namer};
use ptsim::blocklog::BlockLog;
use ptsim::expected::{Branch, BranchKind, ThreadExpectation};
use ptsim::perfscript::Symbols;
use ptsim::stacks::StackTimeline;
use ptsim::truth::{StepKind, ThreadTrace};
use ptsim::{SimConfig, Simulation};
use rustc_hash::FxHashMap;
use std::path::{Path, PathBuf};

/// How ptscope reads a `perf.data`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodePath {
    /// `perf script` text, parsed by `ptscope_decode`.
    Text,
    /// perf with ptscope's dlfilter (binary records), as `ptscope decode` does by default.
    Dlfilter,
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
    match path {
        DecodePath::Text => {
            let mut o = PerfScriptOptions::new(perf_data);
            o.kind = Some(RecordingKind::IntelPt);
            let mut s = PerfScript::spawn(&o).context("cannot start perf script")?;
            while let Some(e) = s.next_event()? {
                events.push(e);
            }
            s.finish()?;
            let mut strings = s.take_strings();
            name_functions(perf_data, &mut events, &mut strings);
            Ok(Decoded { events, strings })
        }
        DecodePath::Dlfilter => {
            let mut o = DlfilterOptions::new(perf_data);
            o.kind = Some(RecordingKind::IntelPt);
            // As the CLI: intra-function jumps carry timestamps that bound the writers.
            o.keep_jumps = true;
            let (mut s, _) =
                ptscope_dlfilter_reader::open(&o, StringTable::new(), Choice::Dlfilter)
                    .context("cannot start perf with the dlfilter")?;
            while let Some(e) = s.next_event()? {
                events.push(e);
            }
            s.finish()?;
            let mut strings = s.take_strings();
            name_functions(perf_data, &mut events, &mut strings);
            Ok(Decoded { events, strings })
        }
    }
}

/// The naming step `ptscope decode` runs between decoding and its writers, for the
/// recording at `perf_data`: code perf has no symbol for is named per function (a debug
/// file's symbol, else the `.eh_frame` FDE holding it) instead of per address.
fn namer(perf_data: &Path) -> Namer {
    let mut n = Namer::new(true, true);
    n.set_mappings(Mappings::read(perf_data).ok());
    n
}

/// Runs [`namer`] over decoded `events`, as `ptscope decode` does.
fn name_functions(perf_data: &Path, events: &mut [Event], strings: &mut StringTable) {
    let mut n = namer(perf_data);
    for e in events {
        n.apply(e, strings);
    }
}

/// Names the true stacks' code without symbols as the naming step names the trace's.
///
/// ptsim names a frame in such code after the address it was entered at,
/// `[unknown @ ADDR (DSO)]`; the trace names the function holding an address. The
/// truth's entry lies in the function it names, so renaming it after that function
/// gives the name the trace shows for the same frame.
fn name_truth(timelines: &mut [StackTimeline], perf_data: &Path, pid: u32) {
    let mut n = namer(perf_data);
    let mut strings = StringTable::new();
    let mut renamed: FxHashMap<String, Option<String>> = FxHashMap::default();
    for tl in timelines {
        for piece in &mut tl.pieces {
            for name in &mut piece.2 {
                if !name.starts_with("[unknown @ 0x") {
                    continue;
                }
                let new = renamed.entry(name.clone()).or_insert_with(|| {
                    let (ip, dso) = parse_unknown(name)?;
                    let dso = strings.intern(dso);
                    let (f, _) = n.function_at_address(Some(pid), dso, ip, &mut strings)?;
                    Some(strings.get(f).to_string())
                });
                if let Some(new) = new {
                    name.clone_from(new);
                }
            }
        }
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

/// The scored truth for a decoded recording: per thread, the perf-clock timeline clipped
/// to the thread's first..last decoded event, with windows taken from the events.
///
/// `windows` are the distinct event times; `order_windows` leave out jumps within one
/// symbol and power events (they change no stack); a gap runs from a decode error to the
/// thread's next event.
pub fn thread_truths(timelines: &[StackTimeline], d: &Decoded) -> Vec<ThreadTruth> {
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
        // A thread's name (perf's COMM and FORK side-band, printed for the task events)
        // is no trace of its stack: a snapshot's COMM from the exec long before the
        // buffer would stretch the scored span over time no writer saw.
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
            let Some(time) = e.time().map(|t| t * SCALE).or(last) else {
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
                } => same_symbol(src.symbol, dst.symbol),
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
        LegacyConfig {
            earliest_time: earliest,
            ..LegacyConfig::default()
        },
    )
}

/// The segments writer as the CLI configures it for a user-only trace.
pub fn segments(sink: TimelineSink, earliest: u64) -> SegmentsWriter<TimelineSink> {
    SegmentsWriter::new(
        sink,
        SegmentsConfig {
            earliest_time: earliest,
            ..SegmentsConfig::default()
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
    /// The legacy writer's score.
    pub legacy: Fidelity,
    /// The segments writer's score.
    pub segments: Fidelity,
    /// Both writers' reconstructions (legacy, segments), to compare paths.
    pub recon: (Vec<ReconThread>, Vec<ReconThread>),
    /// The truth scored against (from this path's events).
    pub truth: Vec<ThreadTruth>,
}

/// Scores one decoded recording against perf-clock `timelines` with both writers.
pub fn score_decoded(timelines: &[StackTimeline], d: &Decoded) -> PathScore {
    let truth = thread_truths(timelines, d);
    let l = reconstruct_decoded(d, legacy);
    let s = reconstruct_decoded(d, segments);
    PathScore {
        events: d.events.len(),
        errors: d
            .events
            .iter()
            .filter(|e| matches!(e, Event::DecodeError { .. }))
            .count(),
        legacy: unscale(score(&truth, &l)),
        segments: unscale(score(&truth, &s)),
        recon: (l, s),
        truth,
    }
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

/// True when two reconstructions show the same stacks and slices on every thread.
pub fn same_recon(a: &[ReconThread], b: &[ReconThread]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.thread == y.thread
                && x.timeline == y.timeline
                && x.slices == y.slices
                && x.unmatched_ends == y.unmatched_ends
        })
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
}

impl SimScore {
    /// The two paths rebuilt identical stacks with both writers (and so score the same).
    pub fn paths_identical(&self) -> bool {
        same_recon(&self.text.recon.0, &self.dlfilter.recon.0)
            && same_recon(&self.text.recon.1, &self.dlfilter.recon.1)
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
}

impl SimProgram {
    /// Runs `argv` once under QEMU with ptsim's plugin, in `dir`.
    pub fn record(name: &str, dir: &Path, argv: &[&Path]) -> Result<Self> {
        let out = ptsim::testing::record(dir, argv, &SimConfig::default())?;
        if !out.status.success() {
            bail!("{name} exited with {}", out.status);
        }
        let log = BlockLog::read(&dir.join("ptsim-blocks.log"))?;
        // A full fault-free recording names every function that ever ran, including
        // frames entered before a snapshot starts.
        let syms = Symbols::from_perf(&dir.join("perf.data"))?;
        Ok(SimProgram {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            log,
            syms,
            comm: out.sim.recording.comm.clone(),
            main_steps: out.sim.traces.first().map_or(0, |t| t.steps.len()),
        })
    }

    /// Simulates the variant `cfg` into `dir/variant/perf.data`, builds its perf-clock
    /// truth, decodes it through both paths and scores both writers.
    pub fn score(&self, variant: &str, cfg: &SimConfig) -> Result<SimScore> {
        let (timelines, data) = self.simulate(variant, cfg)?;
        let text = score_decoded(&timelines, &decode(&data, DecodePath::Text)?);
        let dlfilter = score_decoded(&timelines, &decode(&data, DecodePath::Dlfilter)?);
        Ok(SimScore {
            program: self.name.clone(),
            variant: variant.to_string(),
            text,
            dlfilter,
        })
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
