//! The record format shared by the filter (writer) and ptscope's reader.
//!
//! Records are interleaved with perf's own text on perf's stdout. A record starts with
//! a NUL byte, which never starts a line of `perf script` text, then the record type
//! and the payload length. Integers are little-endian. See `docs/dlfilter.md`.

/// First byte of every binary record; text lines never start with it.
pub const MARKER: u8 = 0;
/// Bytes before a record's payload: marker, type, u32 payload length.
pub const HEADER_LEN: usize = 6;
/// Version written in the `HELLO` record; bumped on any incompatible change.
pub const VERSION: u32 = 3;

/// `HELLO`: u32 version. First record of a stream.
pub const REC_HELLO: u8 = 1;
/// `NAME`: u32 id, then the name's bytes. Sent once, before the first use of `id`.
pub const REC_NAME: u8 = 2;
/// `STACK`: short common part, u32 `CHAIN` id (a sample with a callchain).
pub const REC_STACK: u8 = 3;
/// `INLINE`: common part, one location (a sample without a callchain).
pub const REC_INLINE: u8 = 4;
/// `BRANCH`: short common part, u32 flags, u32 source `LOC` id, u32 destination `LOC` id.
pub const REC_BRANCH: u8 = 5;
/// `END`: u64 samples seen, u64 records sent, u64 jumps dropped, u64 passed as text.
pub const REC_END: u8 = 6;
/// `LOC`: u32 id, then one location. Sent once, before the first use of `id`.
pub const REC_LOC: u8 = 7;
/// `CHAIN`: u32 id, u32 n, n `LOC` ids (leaf first, as perf prints callchains). Sent
/// before the first use of `id`; an id below [`MAX_CHAINS`] may be sent again, and then
/// replaces the earlier chain.
pub const REC_CHAIN: u8 = 8;

/// `NEXT_STACK`: u32 time delta, u32 `CHAIN` id, u64 period: a `STACK` sample with the
/// class, pid and tid of the previous sample record, `delta` ns after it.
pub const REC_NEXT_STACK: u8 = 9;
/// `NEXT_BRANCH`: u32 time delta, u32 flags, u32 source and u32 destination `LOC` ids:
/// a `BRANCH` with the class, pid and tid of the previous sample record, `delta` ns
/// after it.
pub const REC_NEXT_BRANCH: u8 = 10;

/// Chain ids stay below this: the filter starts again from 0 (resending chains as they
/// recur) rather than let the reader's table grow without bound.
pub const MAX_CHAINS: u32 = 1 << 16;

/// "No name" in a location's symbol or DSO id.
pub const NO_NAME: u32 = u32::MAX;

/// Size of the common part: class u8, cpumode u8, u16 reserved, pid i32, tid i32,
/// time u64, cpu i32, flags u32, period u64, ip u64, addr u64, insn_cnt u64, cyc_cnt u64.
pub const COMMON_LEN: usize = 4 + 4 + 4 + 8 + 4 + 4 + 8 * 5;
/// Size of the short common part of `STACK` and `BRANCH`: class u8, 3 bytes reserved,
/// pid i32, tid i32, time u64.
pub const SHORT_LEN: usize = 4 + 4 + 4 + 8;
/// Size of a `STACK` payload: short common part, period u64, chain id u32.
pub const STACK_LEN: usize = SHORT_LEN + 8 + 4;
/// Size of a `BRANCH` payload: short common part, flags u32, two location ids.
pub const BRANCH_LEN: usize = SHORT_LEN + 4 + 4 + 4;
/// Size of a `NEXT_STACK` or `NEXT_BRANCH` payload.
pub const NEXT_LEN: usize = 16;
/// Size of one location: printed ip u64, symbol id u32, DSO id u32, offset u64.
pub const LOC_LEN: usize = 8 + 4 + 4 + 8;

/// What the text decoder would make of an event, by its name (`ptscope-decode`'s `classify`).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Class {
    /// A sample whose callchain (or own location) is a stack: `cpu-clock`, uprobes, …
    Sample = 0,
    /// Intel PT `branches`.
    Branches = 1,
    /// `cbr`.
    Cbr = 2,
    /// `ptwrite`.
    Ptwrite = 3,
    /// PT events the text decoder skips (`psb`, power events, …).
    Ignored = 4,
    /// `branch-misses`.
    BranchMisses = 5,
    /// `cache-misses`.
    CacheMisses = 6,
    /// `sched:sched_switch`: the stack a thread left the CPU in. The filter leaves these
    /// to perf's text (no record carries this class).
    SwitchOut = 7,
}

impl Class {
    /// The class with this wire code.
    pub fn from_u8(b: u8) -> Option<Class> {
        Some(match b {
            0 => Class::Sample,
            1 => Class::Branches,
            2 => Class::Cbr,
            3 => Class::Ptwrite,
            4 => Class::Ignored,
            5 => Class::BranchMisses,
            6 => Class::CacheMisses,
            7 => Class::SwitchOut,
            _ => return None,
        })
    }
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')
}

/// Classifies an event name and says whether the text decoder reads its header
/// cleanly, i.e. `NAME: ` leaves nothing of the name in the line's remainder (a
/// breakpoint's `mem:0x401126:x` does not). Mirrors `ptscope-decode`'s header parser.
pub fn classify(evname: &[u8]) -> (Class, bool) {
    if evname == b"sched:sched_switch" {
        return (Class::SwitchOut, true);
    }
    let n = evname.iter().take_while(|&&b| is_name_byte(b)).count();
    let class = match &evname[..n] {
        b"branches" => Class::Branches,
        b"cbr" => Class::Cbr,
        b"ptwrite" => Class::Ptwrite,
        b"psb" | b"mwait" | b"pwre" | b"pwrx" | b"exstop" | b"evt" | b"iflag" | b"cfe" => {
            Class::Ignored
        }
        b"branch-misses" => Class::BranchMisses,
        b"cache-misses" => Class::CacheMisses,
        _ => Class::Sample,
    };
    if n == 0 {
        return (class, false);
    }
    // perf prints `NAME: `; walk it as the header parser does.
    let mut s = evname.to_vec();
    s.extend_from_slice(b": ");
    let mut i = n;
    if s.get(i) == Some(&b'/') {
        i += 1;
        while i < s.len() && !matches!(s[i], b'/' | b' ' | b':') {
            i += 1;
        }
        if s.get(i) == Some(&b'/') {
            i += 1;
            while i < s.len() && s[i].is_ascii_alphabetic() {
                i += 1;
            }
        }
    }
    if s.get(i) != Some(&b':') {
        return (class, false);
    }
    i += 1;
    let k = s[i..]
        .iter()
        .take_while(|b| b.is_ascii_alphabetic())
        .count();
    if k > 0 && s.get(i + k) == Some(&b':') {
        i += k + 1;
    }
    (class, i == s.len() - 1)
}

/// perf's `PERF_IP_FLAG_*` bits (the dlfilter header names the first 13).
pub mod flags {
    /// A branch.
    pub const BRANCH: u32 = 1 << 0;
    /// A call.
    pub const CALL: u32 = 1 << 1;
    /// A return.
    pub const RETURN: u32 = 1 << 2;
    /// Conditional.
    pub const CONDITIONAL: u32 = 1 << 3;
    /// System call or return.
    pub const SYSCALLRET: u32 = 1 << 4;
    /// Asynchronous.
    pub const ASYNC: u32 = 1 << 5;
    /// Interrupt.
    pub const INTERRUPT: u32 = 1 << 6;
    /// Transaction abort.
    pub const TX_ABORT: u32 = 1 << 7;
    /// Tracing started.
    pub const TRACE_BEGIN: u32 = 1 << 8;
    /// Tracing ended.
    pub const TRACE_END: u32 = 1 << 9;
    /// Inside a transaction.
    pub const IN_TX: u32 = 1 << 10;
    /// VM entry.
    pub const VMENTRY: u32 = 1 << 11;
    /// VM exit.
    pub const VMEXIT: u32 = 1 << 12;
    /// Interrupts disabled.
    pub const INTR_DISABLE: u32 = 1 << 13;
    /// Interrupt state toggled.
    pub const INTR_TOGGLE: u32 = 1 << 14;
    /// Branch miss.
    pub const BRANCH_MISS: u32 = 1 << 15;
    /// The bits perf prints in parentheses after the name.
    pub const AUX: u32 = IN_TX | INTR_DISABLE | INTR_TOGGLE;
}

/// perf's `sample_flags` table (builtin-script.c): flag sets that print as one name.
pub const FLAG_NAMES: &[(u32, &str)] = {
    use flags::*;
    &[
        (BRANCH | CALL, "call"),
        (BRANCH | RETURN, "return"),
        (BRANCH | CONDITIONAL, "jcc"),
        (BRANCH, "jmp"),
        (BRANCH | CALL | INTERRUPT, "int"),
        (BRANCH | RETURN | INTERRUPT, "iret"),
        (BRANCH | CALL | SYSCALLRET, "syscall"),
        (BRANCH | RETURN | SYSCALLRET, "sysret"),
        (BRANCH | ASYNC, "async"),
        (BRANCH | CALL | ASYNC | INTERRUPT, "hw int"),
        (BRANCH | TX_ABORT, "tx abrt"),
        (BRANCH | TRACE_BEGIN, "tr strt"),
        (BRANCH | TRACE_END, "tr end"),
        (BRANCH | CALL | VMENTRY, "vmentry"),
        (BRANCH | CALL | VMEXIT, "vmexit"),
        (BRANCH | BRANCH_MISS, "br miss"),
    ]
};

fn flag_name(f: u32) -> Option<&'static str> {
    FLAG_NAMES.iter().find(|&&(v, _)| v == f).map(|&(_, n)| n)
}

/// The words perf prints for branch `flags` (`perf_sample__sprintf_flags`), without
/// padding or the `(x)` part; `None` when perf would fall back to single letters.
pub fn flag_words(f: u32) -> Option<(&'static str, &'static str)> {
    use flags::*;
    let base = f & !AUX;
    if base == 0 {
        return Some(("", ""));
    }
    if let Some(n) = flag_name(base) {
        return Some(("", n));
    }
    if base & TRACE_BEGIN != 0 {
        if let Some(n) = flag_name(base & !TRACE_BEGIN) {
            return Some(("tr strt", n));
        }
    }
    if base & TRACE_END != 0 {
        if let Some(n) = flag_name(base & !TRACE_END) {
            return Some(("tr end", n));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_matches_header_parser() {
        assert_eq!(classify(b"cpu-clock"), (Class::Sample, true));
        assert_eq!(classify(b"probe_prog:leaf"), (Class::Sample, true));
        assert_eq!(classify(b"branches:uH"), (Class::Branches, true));
        assert_eq!(
            classify(b"branch-misses/period=50/u"),
            (Class::BranchMisses, true)
        );
        assert_eq!(
            classify(b"mem:0x0000000000401161:x"),
            (Class::Sample, false)
        );
        assert_eq!(classify(b"probe_prog:leaf_2"), (Class::Sample, false));
        assert_eq!(classify(b"psb"), (Class::Ignored, true));
        assert_eq!(classify(b""), (Class::Sample, false));
    }

    #[test]
    fn flag_words_follow_perf() {
        use flags::*;
        assert_eq!(flag_words(BRANCH | CALL), Some(("", "call")));
        assert_eq!(flag_words(BRANCH | CALL | IN_TX), Some(("", "call")));
        assert_eq!(
            flag_words(BRANCH | CONDITIONAL | TRACE_BEGIN),
            Some(("tr strt", "jcc"))
        );
        assert_eq!(flag_words(BRANCH | TRACE_END), Some(("", "tr end")));
        assert_eq!(flag_words(0), Some(("", "")));
        assert_eq!(flag_words(CALL), None);
    }
}
