//! Recording for ptscope: what `ptscope run` and `ptscope attach` need below the command line.
//!
//! - [`caps`]: what this machine's perf, CPU and kernel can do.
//! - [`argv`]: the exact `perf record` command line for a [`argv::RecordPlan`] (magic-trace's
//!   order, so behaviour can be compared flag by flag).
//! - [`control`]: the `--control=fifo:CTL,ACK` protocol (`snapshot`, `stop`, `ping` + `ack`).
//! - [`process`]: starting a program stopped, attaching, signals, perf's lifetime.
//! - [`trigger`]: hardware execute breakpoints through `perf_event_open`.
//! - [`hits`]: trigger hits saved in the working directory for `ptscope decode DIR`.
//! - [`session`]: one whole recording, tying the above together.

#![warn(missing_docs)]

pub mod argv;
pub mod caps;
pub mod control;
pub mod hits;
pub mod process;
pub mod ring;
pub mod session;
pub mod trigger;
