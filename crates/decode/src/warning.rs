//! What the decoder reports about input it could not (fully) use.

use std::fmt;

/// Why a line or group was skipped or only partly understood.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum WarningKind {
    /// A line that is neither blank, a callchain line, an error line nor a valid header.
    MalformedHeader,
    /// A number that does not fit (time, period, frequency).
    BadNumber,
    /// A `branches` line without `SRCIP SRCSYM => DSTIP DSTSYM`.
    MalformedBranch,
    /// A `branches` line whose flags hold a word this decoder does not know; the event
    /// is kept with no kind.
    UnknownBranchFlags,
    /// A callchain line that is not `\t IP SYM`; the frame is dropped, the sample kept.
    MalformedFrame,
    /// A `cbr` event without `cbr: N freq: MHZ MHz`.
    MalformedCbr,
    /// A `ptwrite` event without `IP: … payload: 0x… ADDR IP SYM`.
    MalformedPtwrite,
    /// An `instruction trace error` line missing its fields.
    MalformedTraceError,
    /// An `instruction trace error` line with a field this decoder does not know; the
    /// error event is kept.
    UnknownTraceErrorField,
    /// A callchain line with no header before it.
    OrphanFrame,
    /// A non-sampling event this decoder cannot turn into anything.
    UnsupportedEvent,
    /// A line longer than the decoder's limit; it was dropped.
    LineTooLong,
    /// A `PERF_RECORD_COMM`/`PERF_RECORD_FORK` line without its pid/tid fields.
    MalformedTaskEvent,
}

impl WarningKind {
    /// A short human description.
    pub fn description(self) -> &'static str {
        match self {
            WarningKind::MalformedHeader => "unrecognised line",
            WarningKind::BadNumber => "number out of range",
            WarningKind::MalformedBranch => "malformed branch event",
            WarningKind::UnknownBranchFlags => "unknown branch flags (kept without a kind)",
            WarningKind::MalformedFrame => "malformed callchain line (frame dropped)",
            WarningKind::MalformedCbr => "malformed cbr event",
            WarningKind::MalformedPtwrite => "malformed ptwrite event",
            WarningKind::MalformedTraceError => "malformed trace error line",
            WarningKind::MalformedTaskEvent => "malformed thread name or fork line",
            WarningKind::UnknownTraceErrorField => "unknown field in trace error (kept)",
            WarningKind::OrphanFrame => "callchain line without a sample header",
            WarningKind::UnsupportedEvent => "unsupported event",
            WarningKind::LineTooLong => "line too long (dropped)",
        }
    }
}

impl fmt::Display for WarningKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

/// One kept warning: where, why, and (the start of) the offending line.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Warning {
    /// 1-based line number in the input.
    pub line: u64,
    /// What was wrong.
    pub kind: WarningKind,
    /// The line, lossily decoded and cut to [`Warning::MAX_TEXT`] bytes.
    pub text: String,
}

impl Warning {
    /// How much of the offending line is kept.
    pub const MAX_TEXT: usize = 200;
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}: {:?}", self.line, self.kind, self.text)
    }
}

/// Running totals over the input decoded so far.
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub struct Stats {
    /// Lines read (a final line without a newline counts).
    pub lines: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Events returned.
    pub events: u64,
    /// Warnings raised, including those not kept verbatim.
    pub warnings: u64,
    /// Groups deliberately skipped (`psb` and other synthesized PT events with no meaning here).
    pub ignored: u64,
}
