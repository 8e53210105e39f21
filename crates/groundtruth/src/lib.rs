//! Ground truth for stack reconstruction: synthetic executions whose true stack is known
//! at every instant, recorded as perf would show them and cut like real recordings, plus
//! a score of how closely a [`StackWriter`] rebuilds those stacks.
//!
//! ```
//! use ptscope_groundtruth::{evaluate, gen, legacy_writer};
//!
//! let mut spec = gen::standard_specs(1).remove(0); // "clean"
//! spec.params.steps = 500;
//! let scenario = gen::generate(&spec);
//! let f = evaluate(&scenario, legacy_writer);
//! assert!(f.exact > 0.99 && f.phantom_frames == 0);
//! ```
//!
//! See `FIDELITY.md` at the repository root for the method and the current numbers.

pub mod gen;
pub mod names;
#[cfg(test)]
mod oracle;
pub mod render;
pub mod rng;
pub mod score;
pub mod sim;
pub mod sink;

pub use gen::{generate, Scenario, Spec, ThreadTruth};
pub use names::{Names, StackId};
pub use score::{score, score_interned, Fidelity, Truth};
pub use sink::{Recon, ReconThread, TimelineSink};

use ptscope_stacks::legacy::LegacyWriter;
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::StackWriter;

/// Runs `scenario`'s events through the writer `make_writer` builds and scores the result.
///
/// `make_writer` gets the sink and the scenario (for its `earliest_time`); writers
/// emit times relative to that, which are mapped back to the events' clock here.
pub fn evaluate<W, F>(scenario: &Scenario, make_writer: F) -> Fidelity
where
    W: StackWriter<TimelineSink>,
    F: FnOnce(TimelineSink, &Scenario) -> W,
{
    let mut names = Names::new();
    let sink = write_events(
        &scenario.events,
        &scenario.strings,
        scenario.earliest_time(),
        |sink, _| make_writer(sink, scenario),
    );
    let mut recon = sink.into_recon(&mut names);
    let base = scenario.earliest_time() as i64;
    for r in &mut recon {
        r.shift(base, 1);
    }
    let truth: Vec<Truth> = scenario
        .truth
        .iter()
        .map(|t| Truth::intern(t, &mut names))
        .collect();
    score_interned(&truth, &recon, &names)
}

/// The writer's per-thread stacks for `scenario`, on the events' clock.
pub fn reconstruct<W, F>(scenario: &Scenario, make_writer: F) -> Vec<ReconThread>
where
    W: StackWriter<TimelineSink>,
    F: FnOnce(TimelineSink, &Scenario) -> W,
{
    reconstruct_events(
        &scenario.events,
        &scenario.strings,
        scenario.earliest_time(),
        |sink, _| make_writer(sink, scenario),
    )
}

/// The per-thread stacks a writer builds from `events`, on the events' clock; the writer
/// gets `earliest` (its `earliest_time`), and its relative times are mapped back here.
pub fn reconstruct_events<W, F>(
    events: &[ptscope_event::Event],
    strings: &ptscope_event::StringTable,
    earliest: u64,
    make_writer: F,
) -> Vec<ReconThread>
where
    W: StackWriter<TimelineSink>,
    F: FnOnce(TimelineSink, u64) -> W,
{
    let sink = write_events(events, strings, earliest, make_writer);
    let base = earliest as i64;
    let mut threads = sink.threads();
    for t in &mut threads {
        for p in &mut t.timeline {
            p.0 += base;
            p.1 += base;
        }
        for s in &mut t.slices {
            s.start += base;
            s.end += base;
        }
    }
    threads
}

/// Feeds `events` to the writer `make_writer` builds and returns its finished sink.
fn write_events<W, F>(
    events: &[ptscope_event::Event],
    strings: &ptscope_event::StringTable,
    earliest: u64,
    make_writer: F,
) -> TimelineSink
where
    W: StackWriter<TimelineSink>,
    F: FnOnce(TimelineSink, u64) -> W,
{
    let mut w = make_writer(TimelineSink::new(), earliest);
    for e in events {
        w.write_event(e, strings);
    }
    w.finish(strings)
}

/// The legacy (magic-trace) writer, configured as the CLI does for a user-only trace.
pub fn legacy_writer(sink: TimelineSink, scenario: &Scenario) -> LegacyWriter<TimelineSink> {
    sim::legacy(sink, scenario.earliest_time())
}

/// The segments writer (with stitching), configured like [`legacy_writer`].
pub fn segments_writer(sink: TimelineSink, scenario: &Scenario) -> SegmentsWriter<TimelineSink> {
    sim::segments(sink, scenario.earliest_time())
}

/// [`segments_writer`] without the marker frame: frames a decode error hid and nothing
/// later proves are carried, guessed to have survived (the default before issue 25).
pub fn segments_guessing_writer(
    sink: TimelineSink,
    scenario: &Scenario,
) -> SegmentsWriter<TimelineSink> {
    sim::segments_guessing(sink, scenario.earliest_time())
}

/// [`segments_writer`] with the marker frame for frames a decode error hid
/// ([`ptscope_stacks::WriterConfig::mark_unknown_frames`], the default; explicit here).
pub fn segments_marked_writer(
    sink: TimelineSink,
    scenario: &Scenario,
) -> SegmentsWriter<TimelineSink> {
    sim::segments_marked(sink, scenario.earliest_time())
}
