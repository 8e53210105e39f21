//! Trace sinks for ptscope: the Fuchsia trace (FXT) file Perfetto opens, and the
//! magic-trace test transcript.
//!
//! ```
//! use ptscope_output::FxtSink;
//! use ptscope_stacks::{Arg, ArgValue, TraceSink};
//!
//! let mut sink = FxtSink::new(Vec::new());
//! let pid = sink.allocate_pid("demo [pid=42]");
//! let main = sink.allocate_thread(pid, "main");
//! sink.duration_begin(main, "main", 0, &[]);
//! sink.duration_complete(main, "read", 5, 9, &[Arg::new("fd", ArgValue::Int(3))]);
//! sink.duration_end(main, "main", 10, &[]);
//! let bytes = sink.finish().expect("writing to a Vec cannot fail");
//!
//! let report = ptscope_fxt::check::validate_bytes(&bytes);
//! assert!(report.is_ok(), "{report}");
//! assert_eq!(report.processes[&1], "demo [pid=42]");
//! assert_eq!(report.count("read"), 1);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod file;
pub mod filter;
pub mod fxt_sink;
// pub mod transcript;

/// The instant on a trace's "ptscope" / "trace info" track that says its slices were
/// made from sampled call stacks: counts and durations are estimates, which `ptscope
/// report` then marks (it reads the part before the colon).
pub const SAMPLED_MARKER: &str = "sampled call stacks: a slice is a run of samples in one \
     frame, so call counts and durations are estimates";

/// The largest trace (uncompressed FXT bytes) the Perfetto UI is expected to load in a
/// browser: its in-browser trace processor has about 2 GiB of WebAssembly memory
/// (Perfetto's "Visualising large traces"; google/perfetto#83) and its in-memory form of
/// a trace is 2–4× the trace's size, so from a quarter of that on a load may fail.
/// BENCHMARKS.md ("Big traces") says how this was arrived at and what was measured.
pub const UI_MAX_TRACE_BYTES: u64 = 512 << 20;

pub use file::{gunzip_if_needed, open_trace_output, read_trace_file, AtomicFile, TraceOutput};
pub use fxt_sink::{FxtSink, FxtThread, SinkStats};
