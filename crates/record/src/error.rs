//! The errors of a recording request that cannot work, as data.
//!
//! Messages say what is wrong in the recording's own terms and name no command-line
//! flag: the CLI knows its flags, and adds the advice in them when it prints
//! (`ptscope`'s `advice` module matches on these variants).

use std::path::PathBuf;

/// A recording plan, trigger or backend that cannot work here.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The plan names no process.
    #[error("no process to record")]
    NoProcess,
    /// Custom Intel PT timing was asked of a sampling recording.
    #[error("custom PT timing does not apply to sampling")]
    CustomTimingWhenSampling,
    /// A sampling rate was asked of an Intel PT recording.
    #[error("a sampling rate (sample:FREQ) applies to sampling only")]
    SampleRateWithPt,
    /// An Intel PT snapshot was given as a duration.
    #[error("with Intel PT the snapshot is a trace buffer of a size, not a duration (`{secs}s`)")]
    SnapshotDurationWithPt {
        /// The duration given.
        secs: u32,
    },
    /// A snapshot duration was given for a recording of the whole execution.
    #[error(
        "a recording of the whole execution keeps everything: a snapshot duration does not apply"
    )]
    SnapshotDurationWithFullExecution,
    /// A snapshot duration was given for a recording of several snapshots.
    #[error("with several snapshots the sampling ring is bounded by a size, not a duration")]
    SnapshotDurationWithMultiSnapshot,
    /// A snapshot duration of 0 s.
    #[error("a snapshot duration must be at least 1 s")]
    ZeroSnapshotDuration,
    /// A snapshot size that is not a power of two of pages.
    #[error("the snapshot size must be a power of two of 4 KiB pages (got {pages} pages)")]
    SnapshotSizeNotPowerOfTwo {
        /// The size given, in pages.
        pages: u32,
    },
    /// Last-branch-record call stacks were asked of a machine without a hardware PMU.
    #[error(
        "last-branch-record call stacks need a hardware PMU with last-branch records, and \
         this machine has none"
    )]
    LbrWithoutPmu,
    /// Intel PT was asked for where it cannot record.
    #[error("{why}: an Intel PT recording cannot be made here")]
    NoIntelPt {
        /// Why not (no PT in this CPU, a VM without passthrough, …).
        why: String,
    },
    /// An empty trigger.
    #[error("a trigger needs a function name, an address, FILE:LINE or `.`")]
    EmptyTrigger,
    /// An `addr:` trigger that is not an address.
    #[error("trigger `{0}` is not an address (write 0x…)")]
    TriggerNotAnAddress(String),
    /// A `line:` trigger that is not `FILE:LINE[:COL]`.
    #[error("trigger `{0}` is not FILE:LINE[:COL]")]
    TriggerNotALine(String),
    /// A trigger's symbol could not be found in the process.
    #[error("trigger `{name}`: {reason}")]
    TriggerSymbol {
        /// The symbol.
        name: String,
        /// Why it was not found.
        reason: String,
    },
    /// The `.` trigger, in a program without ptscope's stop indicator.
    #[error(
        "{} has no `{function}` function for the stop-indicator trigger; link the \
         ptscope-stop-indicator crate or include ptscope.h and call {function}() where the \
         trace should end (in the executable or, once loaded, a shared library)",
        exe.display()
    )]
    NoStopIndicator {
        /// The program.
        exe: PathBuf,
        /// The function looked for.
        function: &'static str,
    },
}
