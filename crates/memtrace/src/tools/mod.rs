//! The reference memtrace tools, re-implemented: same output, byte for byte.

mod cfmt;
mod dump;
mod flamegraph;
mod hotspots;
mod identify;
mod rewrite;

pub use dump::dump;
pub use flamegraph::{flamegraph, FlameGraph};
pub use hotspots::hotspots;
pub use identify::identify;
pub use rewrite::{strip_names, subsample, SubsampleOptions};
