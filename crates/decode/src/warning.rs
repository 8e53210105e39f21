//! What the decoder reports about input it could not (fully) use.

use std::fmt;

pub use ptscope_event::source::{Stats, Warning, WarningKind};

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
