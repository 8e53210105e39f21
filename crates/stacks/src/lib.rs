//! Call-stack reconstruction: from a stream of branch events to well-nested slices.
//!
//! `legacy` reproduces magic-trace's streaming writer exactly; it is the reference
//! the segment-based writer is measured against.

pub mod sink;

pub use sink::{Arg, ArgValue, TraceSink};
