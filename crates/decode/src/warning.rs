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
    /// A header with no time: perf script ran without its `time` field.
    NoTimeField,
    /// A header with a time but no pid or tid: perf script ran without `tid`.
    NoThreadField,
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
            WarningKind::NoTimeField => "no `time` field",
            WarningKind::NoThreadField => "no `tid` field",
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

/// A `perf script` field the input lacks, which makes the trace poorer or impossible.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum MissingField {
    /// No `time`: nothing can be placed on a timeline.
    Time,
    /// No `tid` (nor `pid`): threads cannot be told apart.
    Tid,
    /// No `ip`: perf prints no callchain, so samples have no stacks.
    Ip,
    /// No `sym`: every frame is an address without a name.
    Sym,
    /// Branches without `flags`: calls and returns cannot be told from jumps.
    Flags,
    /// Branches without `symoff` (or `dso`): calls cannot be told from jumps into a
    /// function, and magic-trace's reading of them names nothing.
    Symoff,
}

/// The fields ptscope asks perf script for, for a user to copy.
pub const SAMPLING_FIELDS: &str =
    "perf script --ns -F pid,tid,time,ip,sym,symoff,dso,event,period --show-task-events";
/// The same for Intel PT recordings.
pub const PT_FIELDS: &str = "perf script --ns --itrace=bep -F pid,tid,time,flags,ip,addr,sym,symoff,synth,dso,event,period --show-task-events";

impl MissingField {
    /// The field's name in `perf script -F`.
    pub fn field(self) -> &'static str {
        match self {
            MissingField::Time => "time",
            MissingField::Tid => "tid",
            MissingField::Ip => "ip",
            MissingField::Sym => "sym",
            MissingField::Symoff => "symoff",
            MissingField::Flags => "flags",
        }
    }

    /// What the missing field costs.
    fn consequence(self) -> &'static str {
        match self {
            MissingField::Time => "so nothing can be placed on a timeline",
            MissingField::Tid => "so its threads cannot be told apart",
            MissingField::Ip => "so perf printed no call stacks",
            MissingField::Sym => "so every frame is an unnamed address",
            MissingField::Flags => {
                "so calls and returns cannot be told from jumps and no stack can be rebuilt"
            }
            MissingField::Symoff => {
                "so a call cannot be told from a jump to a function's start (stacks may be wrong, and without `dso` too, names are lost)"
            }
        }
    }
}

impl fmt::Display for MissingField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let example = if matches!(self, MissingField::Symoff | MissingField::Flags) {
            PT_FIELDS
        } else {
            SAMPLING_FIELDS
        };
        write!(
            f,
            "this perf script output has no `{}` field, {}: run perf script with -F +{} (or give ptscope the perf.data file, or run `{example}`)",
            self.field(),
            self.consequence(),
            self.field()
        )
    }
}
