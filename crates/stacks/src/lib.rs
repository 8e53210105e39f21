//! Call-stack reconstruction: from a stream of branch events to well-nested slices.
//!
//! - [`legacy`] reproduces magic-trace's streaming writer exactly; it is the reference
//!   the segment-based writer is measured against.
//! - [`transcript`] renders what a writer emits in magic-trace's test-transcript form.
//! - [`ordered`] restores per-thread time order for writers that emit slices late.
//! - [`sink`] is the interface every output (FXT, transcript) implements.

pub mod legacy;
pub mod ordered;
pub mod sink;
pub mod transcript;

pub use sink::{Arg, ArgValue, TraceSink};
