//! Call-stack reconstruction: from a stream of branch events to well-nested slices.
//!
//! - [`legacy`] reproduces magic-trace's streaming writer exactly; it is the reference
//!   the segment-based writer is measured against.
//! - [`transcript`] renders what a writer emits in magic-trace's test-transcript form.
//! - [`segments`] rebuilds whole segments in memory, stitches them across decode
//!   errors and writes well-nested, time-ordered slices (the default).
//! - [`ordered`] restores per-thread time order for writers that emit slices late.
//! - [`sink`] is the interface every output (FXT, transcript) implements.

pub mod legacy;
pub mod ordered;
pub mod segments;
pub mod sink;
mod tracks;
pub mod transcript;

pub use sink::{Arg, ArgValue, TraceSink};

use ptscope_event::{Event, StringTable};

/// A stack reconstruction strategy: events in, slices out to a [`TraceSink`].
///
/// Implemented by every writer so tools (the CLI, the fidelity harness) can swap them.
pub trait StackWriter<S: TraceSink> {
    /// Feeds one event; `strings` resolves the event's names.
    fn write_event(&mut self, event: &Event, strings: &StringTable);
    /// Feeds one event that is outside a `--filter` range when `should_write` is false.
    fn write_event_filtered(&mut self, event: &Event, should_write: bool, strings: &StringTable);
    /// The sink, e.g. to mark the end of the input in a transcript.
    fn sink_mut(&mut self) -> &mut S;
    /// Ends a snapshot: the next events come from an unrelated later recording.
    fn end_snapshot(&mut self, strings: &StringTable);
    /// Writes whatever is still pending and returns the sink.
    fn finish(self, strings: &StringTable) -> S;
}

impl<S: TraceSink> StackWriter<S> for legacy::LegacyWriter<S> {
    fn write_event(&mut self, event: &Event, strings: &StringTable) {
        legacy::LegacyWriter::write_event(self, event, strings)
    }
    fn write_event_filtered(&mut self, event: &Event, should_write: bool, strings: &StringTable) {
        legacy::LegacyWriter::write_event_filtered(self, event, should_write, strings)
    }
    fn sink_mut(&mut self) -> &mut S {
        legacy::LegacyWriter::sink_mut(self)
    }
    fn end_snapshot(&mut self, strings: &StringTable) {
        legacy::LegacyWriter::end_snapshot(self, None, strings)
    }
    fn finish(self, strings: &StringTable) -> S {
        legacy::LegacyWriter::finish(self, strings)
    }
}
