//! Typed errors: every way a trace can be malformed has its own variant.

use std::fmt;

/// What is wrong with a trace (or with a request made of the writer).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A packet ended in the middle of a field.
    UnexpectedEnd,
    /// A string has no NUL terminator before the end of its packet.
    UnterminatedString,
    /// The file does not start with a trace-info packet, or it is cut short.
    MissingTraceInfo,
    /// A packet header does not start with the magic number.
    BadMagic(u32),
    /// The format version is newer than this reader understands.
    UnsupportedVersion(u16),
    /// The packet size is negative or smaller than its own header.
    BadPacketSize(u32),
    /// A packet's end time is before its start time.
    NonMonotonePacketTimes,
    /// A packet's last allocation id is before its first.
    NonMonotoneAllocIds,
    /// The trace-info packet is malformed (the text says how).
    BadTraceInfo(&'static str),
    /// An event's timestamp falls outside its packet's time range.
    TimeOutOfPacket,
    /// An event is earlier than the previous event of the same domain.
    NonMonotoneTimestamps,
    /// A second trace-info event appeared.
    MultipleTraceInfo,
    /// An event code outside the known set.
    UnknownEventCode(u32),
    /// An allocation source byte other than 0, 1 or 2.
    BadAllocSource(u8),
    /// A promote refers to an object allocated after it.
    PromoteIdSync,
    /// The number of allocations in a packet disagrees with its header.
    AllocIdSync {
        /// The `alloc_id_end` the header announced.
        expected: u64,
        /// The id that decoding the packet reached.
        found: u64,
    },
    /// The backtrace cache disagrees with the packet's verifier.
    CacheVerification,
    /// A move-to-front code refers to an empty table slot.
    BadMtfIndex(u8),
    /// A location code was defined twice with different locations.
    InconsistentLocation(u64),
    /// A backtrace refers to a location code that was never defined.
    UnknownLocationCode(u64),
    /// An allocation's common-prefix length is negative.
    NegativeCommonPrefix(i64),
    /// The writer was given an event for an allocation id other than the next one.
    IncorrectAllocId {
        /// The id the event carries.
        given: u64,
        /// The id the writer assigned.
        assigned: u64,
    },
    /// The writer was given an event earlier than one already written.
    OutOfOrderTimestamp,
    /// The process forked: the child must not write to its parent's trace.
    PidChanged,
    /// (Strict mode) the input ends inside a packet.
    TruncatedPacket,
    /// (Strict mode) a packet was written by another process.
    WrongPid(u64),
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ErrorKind::*;
        match self {
            UnexpectedEnd => write!(f, "unexpected end of packet"),
            UnterminatedString => write!(f, "unterminated string"),
            MissingTraceInfo => write!(f, "no complete trace-info packet at the start"),
            BadMagic(m) => write!(f, "not a CTF packet (magic {m:#010x})"),
            UnsupportedVersion(v) => write!(f, "trace format v{v:03}, but expected at most v003"),
            BadPacketSize(s) => write!(f, "bad packet size ({s} bits)"),
            NonMonotonePacketTimes => write!(f, "packet ends before it starts"),
            NonMonotoneAllocIds => write!(f, "packet allocation ids go backwards"),
            BadTraceInfo(what) => write!(f, "bad trace-info packet: {what}"),
            TimeOutOfPacket => write!(f, "event time outside its packet's bounds"),
            NonMonotoneTimestamps => write!(f, "timestamps go backwards within a domain"),
            MultipleTraceInfo => write!(f, "multiple trace-info events present"),
            UnknownEventCode(c) => write!(f, "unknown event code {c}"),
            BadAllocSource(s) => write!(f, "bad allocation source {s}"),
            PromoteIdSync => write!(f, "promote of an object not yet allocated"),
            AllocIdSync { expected, found } => write!(
                f,
                "allocation id out of sync (header says {expected}, packet reached {found})"
            ),
            CacheVerification => write!(f, "backtrace cache verification failed"),
            BadMtfIndex(i) => write!(f, "move-to-front index {i} refers to an empty slot"),
            InconsistentLocation(c) => write!(f, "inconsistent location info for code {c:#x}"),
            UnknownLocationCode(c) => write!(f, "invalid location code {c:08x}"),
            NegativeCommonPrefix(n) => write!(f, "negative backtrace common prefix {n}"),
            IncorrectAllocId { given, assigned } => write!(
                f,
                "incorrect allocation id {given} (the writer's next id is {assigned})"
            ),
            OutOfOrderTimestamp => write!(f, "out-of-order timestamps"),
            PidChanged => write!(f, "process id changed (forked child): tracing stopped"),
            TruncatedPacket => write!(f, "input ends inside a packet"),
            WrongPid(p) => write!(f, "packet from another process (pid {})", *p as i64),
        }
    }
}

/// An error from reading or writing a trace.
#[derive(Debug)]
pub enum Error {
    /// The underlying file or stream failed.
    Io(std::io::Error),
    /// The trace is malformed at `offset` (bytes from the start of the trace).
    Malformed {
        /// Byte offset where the problem was detected.
        offset: u64,
        /// What is wrong.
        kind: ErrorKind,
    },
    /// The writer refused an operation.
    Writer(ErrorKind),
    /// The trace decodes but is inconsistent (e.g. a backtrace uses an undefined code).
    Invalid(ErrorKind),
}

impl Error {
    /// The kind of a format or writer error (`None` for I/O errors).
    pub fn kind(&self) -> Option<&ErrorKind> {
        match self {
            Error::Io(_) => None,
            Error::Malformed { kind, .. } | Error::Writer(kind) | Error::Invalid(kind) => {
                Some(kind)
            }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "I/O error: {e}"),
            Error::Malformed { offset, kind } => {
                write!(f, "malformed trace at byte {offset}: {kind}")
            }
            Error::Writer(kind) => write!(f, "trace writer: {kind}"),
            Error::Invalid(kind) => write!(f, "invalid trace: {kind}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
