//! The reference memtrace tools, re-implemented: same output, byte for byte.

mod dump;

pub use dump::dump;
