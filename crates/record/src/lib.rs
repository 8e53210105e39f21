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
//!
//! A recording starts as a [`argv::RecordPlan`]; its `perf record` command line is
//! plain data, so it can be checked (and shown) before anything runs:
//!
//! ```
//! use ptscope_record::argv::{perf_record_argv, Backend, CallGraph, RecordPlan};
//! use ptscope_record::Error;
//!
//! // Sample process 42 with cpu-clock and DWARF call stacks (no hardware PMU here).
//! let mut plan = RecordPlan::new("perf", "/work/perf.data", vec![42]);
//! plan.backend = Backend::Sample;
//! plan.hardware_pmu = false;
//! plan.validate()?;
//! let argv = perf_record_argv(&plan);
//! let line: Vec<_> = argv.iter().map(|a| a.to_string_lossy()).collect();
//! let line = line.join(" ");
//! println!("{line}");
//! assert!(line.starts_with("perf record -o /work/perf.data --timestamp --event=cpu-clock/"));
//! assert!(line.contains(" -p 42 ") && line.contains("--call-graph dwarf"));
//!
//! // A plan that cannot work is an error as data; its message names no command-line
//! // flag (the CLI adds its own advice when it prints it).
//! plan.callgraph = CallGraph::Lbr;
//! let err = plan.validate().unwrap_err();
//! assert!(matches!(err, Error::LbrWithoutPmu));
//! assert!(err.to_string().contains("hardware PMU"));
//! # Ok::<(), Error>(())
//! ```

#![warn(missing_docs)]

pub mod argv;
pub mod caps;
pub mod control;
mod error;
pub mod hits;
pub mod process;
pub mod ring;
pub mod session;
pub mod trigger;

pub use error::{Error, Result};
