//! The event model shared by every ptscope stage.
//!
//! Decoders (the `perf script` text parser, the dlfilter) turn a recording into a
//! stream of [`Event`]s; stack writers turn that stream into trace slices. Names
//! (symbols, DSOs, error messages), code locations and sampled stacks are interned once
//! in a [`StringTable`] and carried as handles ([`Sym`], [`LocationHandle`],
//! [`StackHandle`]), so a branch event is small and decoding allocates nothing per
//! branch.
//!
//! ```
//! use ptscope_event::{Event, EventData, Kind, Location, StringTable, Symbol, Thread};
//!
//! let mut strings = StringTable::new();
//! let main = strings.intern("main");
//! let foo = strings.intern("foo");
//! // A branch's ends are interned too: a location seen a million times is stored once.
//! let src = strings.intern_location(Location::new(0x1000, Symbol::FromPerf(main), 0x10));
//! let dst = strings.intern_location(Location::new(0x2000, Symbol::FromPerf(foo), 0));
//! let ev = Event::Ok {
//!     thread: Thread { pid: Some(42), tid: Some(42) },
//!     time: 1_000,
//!     in_transaction: false,
//!     data: EventData::Trace { change: None, kind: Some(Kind::Call), src, dst },
//! };
//! assert_eq!(ev.time(), Some(1_000));
//! assert_eq!(strings.display(strings.location(dst).symbol), "foo");
//! ```

pub mod exact;
pub mod source;

use rustc_hash::{FxHashMap, FxHasher};
pub use source::{EventSource, SourceInfo};
use std::fmt;
use std::hash::{Hash, Hasher};

/// A handle to a string interned in a [`StringTable`].
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Sym(pub u32);

/// A handle to a [`Location`] interned in a [`StringTable`].
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct LocationHandle(pub u32);

/// How a process started its program, as the naming step read it from the program's
/// file: where it entered (`e_entry`), and, when the entry's code says so, the program's
/// `main` (the function glibc's `_start` passes to `__libc_start_main`) and the C
/// library's function that calls it (`__libc_start_call_main` since glibc 2.34), each
/// named as a branch there is named. A stack writer that lost the start-up to a decode
/// error infers these frames from them (`StackWriter::set_process_start`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct ProcessStart {
    /// The program's entry (`_start`, or `sqlite3+0xa780` in a stripped program).
    pub entry: LocationHandle,
    /// The program's `main`, if the entry's code names it.
    pub main: Option<LocationHandle>,
    /// The C library's function that calls `main`, if the library names one.
    pub main_caller: Option<LocationHandle>,
}

/// A handle to a call stack (root first) interned in a [`StringTable`]: a sampled
/// stack is stored once however many samples repeat it.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct StackHandle(pub u32);

/// Where one interned stack's frames are in [`StringTable`]'s frame list.
#[derive(Copy, Clone, Debug)]
struct StackEntry {
    start: u32,
    len: u32,
    /// The previous stack with the same hash (a collision chain through `stacks`).
    next: Option<u32>,
}

/// log2 of the slots of [`StringTable`]'s location cache.
const LOCATION_CACHE_BITS: u32 = 12;
/// Slots of [`StringTable`]'s location cache.
const LOCATION_CACHE: usize = 1 << LOCATION_CACHE_BITS;
/// An empty slot of the location cache.
const NO_LOCATION: u32 = u32::MAX;

/// Interns names once and hands out [`Sym`] handles; lookups by handle are O(1).
///
/// It also interns code locations ([`LocationHandle`]) and sampled call stacks
/// ([`StackHandle`]), the way fxprof-processed-profile has frame and stack tables: a
/// stack is a slice of location handles stored once, so an event carries a `u32`
/// instead of a cloned `Vec<Location>`. Every stage that sees events already gets this
/// table, so stack handles need no other plumbing.
#[derive(Default, Debug, Clone)]
pub struct StringTable {
    map: FxHashMap<Box<str>, Sym>,
    strings: Vec<Box<str>>,
    /// Names shown instead of the raw ones (demangled symbols); `get` keeps the raw name.
    display: FxHashMap<Sym, Box<str>>,
    locations: Vec<Location>,
    location_map: FxHashMap<Location, LocationHandle>,
    /// A direct-mapped cache in front of `location_map`, by address: decoders intern
    /// both ends of every branch, the same few locations over and over, and one compare
    /// is cheaper than hashing a location (allocated on first use).
    location_cache: Box<[(Location, u32)]>,
    /// Every stack's location handles, root first, stacks back to back.
    frames: Vec<LocationHandle>,
    stacks: Vec<StackEntry>,
    /// Hash of a stack's frames → the last stack added with that hash.
    stack_map: FxHashMap<u64, u32>,
}

impl StringTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Returns the handle of `s`, adding it if it is new (allocates only then).
    pub fn intern(&mut self, s: &str) -> Sym {
        if let Some(&sym) = self.map.get(s) {
            return sym;
        }
        let sym = Sym(self.strings.len() as u32);
        let boxed: Box<str> = s.into();
        self.strings.push(boxed.clone());
        self.map.insert(boxed, sym);
        sym
    }

    /// Returns the handle of `bytes` read as UTF-8, invalid sequences replaced (which
    /// allocates only then): perf passes names as raw bytes.
    #[inline]
    pub fn intern_bytes(&mut self, bytes: &[u8]) -> Sym {
        match std::str::from_utf8(bytes) {
            Ok(s) => self.intern(s),
            Err(_) => self.intern(&String::from_utf8_lossy(bytes)),
        }
    }

    /// Returns the handle of `s` if it was interned before.
    pub fn lookup(&self, s: &str) -> Option<Sym> {
        self.map.get(s).copied()
    }

    /// The string behind a handle. Panics only on a handle from another table.
    pub fn get(&self, sym: Sym) -> &str {
        &self.strings[sym.0 as usize]
    }

    /// Shows `sym` as `name` in traces (e.g. its demangled form); `get` still returns
    /// the raw string, which is what comparisons with runtime symbols need.
    pub fn set_display(&mut self, sym: Sym, name: &str) {
        self.display.insert(sym, name.into());
    }

    /// The name a symbol is shown under in traces.
    pub fn display(&self, symbol: Symbol) -> &str {
        let shown = |s: Sym| match self.display.get(&s) {
            Some(d) => d,
            None => self.get(s),
        };
        match symbol {
            Symbol::FromPerf(s) => shown(s),
            Symbol::Unknown => "[unknown]",
            Symbol::Untraced => "[untraced]",
            Symbol::Returned => "[returned]",
            Symbol::Syscall => "[syscall]",
            Symbol::OffCpu => "[off-cpu]",
            Symbol::Preempted => "[off-cpu: preempted]",
        }
    }

    /// Returns the handle of `loc`, adding it if it is new.
    #[inline]
    pub fn intern_location(&mut self, loc: Location) -> LocationHandle {
        if self.location_cache.is_empty() {
            self.location_cache = vec![(loc, NO_LOCATION); LOCATION_CACHE].into_boxed_slice();
        }
        let slot =
            (loc.ip.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - LOCATION_CACHE_BITS)) as usize;
        let cached = &self.location_cache[slot];
        if cached.1 != NO_LOCATION && cached.0 == loc {
            return LocationHandle(cached.1);
        }
        let h = match self.location_map.get(&loc) {
            Some(&h) => h,
            None => {
                let h = LocationHandle(self.locations.len() as u32);
                self.locations.push(loc);
                self.location_map.insert(loc, h);
                h
            }
        };
        self.location_cache[slot] = (loc, h.0);
        h
    }

    /// The location behind a handle. Panics only on a handle from another table.
    #[inline]
    pub fn location(&self, h: LocationHandle) -> &Location {
        &self.locations[h.0 as usize]
    }

    /// Number of distinct locations interned; handles are `0..location_count()`, in the
    /// order they were added.
    pub fn location_count(&self) -> usize {
        self.locations.len()
    }

    /// Returns the handle of the stack made of `frames` (root first), adding it if it
    /// is new; interning an unchanged stack again gives the same handle.
    pub fn intern_stack(&mut self, frames: impl IntoIterator<Item = Location>) -> StackHandle {
        // The frames go at the end of the list; they stay only if the stack is new.
        let start = self.frames.len();
        for loc in frames {
            let h = self.intern_location(loc);
            self.frames.push(h);
        }
        self.end_stack(start)
    }

    /// [`StringTable::intern_stack`] of locations interned already (handles of this
    /// table).
    pub fn intern_stack_handles(
        &mut self,
        frames: impl IntoIterator<Item = LocationHandle>,
    ) -> StackHandle {
        let start = self.frames.len();
        self.frames.extend(frames);
        self.end_stack(start)
    }

    /// The handle of the stack whose frames were pushed from `start` on: an existing
    /// one (the pushed frames are dropped again) or a new one.
    fn end_stack(&mut self, start: usize) -> StackHandle {
        let new = &self.frames[start..];
        let mut hasher = FxHasher::default();
        new.hash(&mut hasher);
        let hash = hasher.finish();
        let mut candidate = self.stack_map.get(&hash).copied();
        while let Some(c) = candidate {
            let e = self.stacks[c as usize];
            if self.frames[e.start as usize..(e.start + e.len) as usize] == *new {
                self.frames.truncate(start);
                return StackHandle(c);
            }
            candidate = e.next;
        }
        let id = self.stacks.len() as u32;
        self.stacks.push(StackEntry {
            start: start as u32,
            len: new.len() as u32,
            next: self.stack_map.insert(hash, id),
        });
        StackHandle(id)
    }

    /// The location handles of a stack, root first. Panics only on a handle from
    /// another table.
    #[inline]
    pub fn stack_handles(&self, h: StackHandle) -> &[LocationHandle] {
        let e = self.stacks[h.0 as usize];
        &self.frames[e.start as usize..(e.start + e.len) as usize]
    }

    /// The locations of a stack, root first (the leaf is the last).
    #[inline]
    pub fn stack(
        &self,
        h: StackHandle,
    ) -> impl ExactSizeIterator<Item = &Location> + DoubleEndedIterator + Clone + '_ {
        self.stack_handles(h)
            .iter()
            .map(move |&l| &self.locations[l.0 as usize])
    }

    /// Number of distinct stacks interned; handles are `0..stack_count()`, in the
    /// order they were added.
    pub fn stack_count(&self) -> usize {
        self.stacks.len()
    }

    /// Number of distinct strings interned.
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    /// True when nothing has been interned.
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }
}

/// A process/thread pair as perf reports it; perf's `0` means "not known" and is `None`.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct Thread {
    /// Process id.
    pub pid: Option<u32>,
    /// Thread id.
    pub tid: Option<u32>,
}

/// The branch kinds perf's `flags` field distinguishes.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Kind {
    /// Asynchronous branch (`async`), e.g. an interrupt observed as a trace end.
    Async,
    /// `call`.
    Call,
    /// `return`.
    Return,
    /// `syscall`.
    Syscall,
    /// `sysret`.
    Sysret,
    /// `hw int`.
    HardwareInterrupt,
    /// `int` (software interrupt).
    Interrupt,
    /// `iret`.
    Iret,
    /// `jmp` or `jcc`.
    Jump,
    /// `tx abrt`: a TSX transaction aborted.
    TxAbort,
}

/// Whether a branch also switched tracing on (`tr strt`) or off (`tr end`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum TraceStateChange {
    /// Tracing (re)started at this branch's destination.
    Start,
    /// Tracing stopped at this branch's source.
    End,
}

/// What a code address is known as.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Symbol {
    /// A name perf resolved (including perf's synthetic `[unknown @ …]` names).
    FromPerf(Sym),
    /// Nothing is known.
    Unknown,
    /// Synthetic frame: tracing was off.
    Untraced,
    /// Synthetic frame: tracing stopped at a return.
    Returned,
    /// Synthetic frame: tracing stopped at a syscall.
    Syscall,
    /// Synthetic frame: the thread was off CPU (switched out, blocked or sleeping).
    OffCpu,
    /// Synthetic frame: the thread was off CPU, preempted while still runnable.
    Preempted,
}

/// An instruction address with what it resolves to.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Location {
    /// The instruction pointer.
    pub ip: u64,
    /// The symbol containing it.
    pub symbol: Symbol,
    /// Offset of `ip` from the symbol's start (perf's `symoff`, truncated to 63 bits).
    pub offset: u64,
    /// The DSO perf named, if any.
    pub dso: Option<Sym>,
}

impl Location {
    /// A location without a DSO.
    pub fn new(ip: u64, symbol: Symbol, offset: u64) -> Self {
        Location {
            ip,
            symbol,
            offset,
            dso: None,
        }
    }

    /// A synthetic location with no address (e.g. `[untraced]`).
    pub fn locationless(symbol: Symbol) -> Self {
        Location::new(0, symbol, 0)
    }
}

/// Extra sampled hardware events that magic-trace shows on their own tracks.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum ExtraEvent {
    /// `branch-misses`.
    BranchMisses,
    /// `cache-misses`.
    CacheMisses,
}

impl ExtraEvent {
    /// The perf event name, also used as the track name.
    pub fn name(self) -> &'static str {
        match self {
            ExtraEvent::BranchMisses => "branch-misses",
            ExtraEvent::CacheMisses => "cache-misses",
        }
    }
}

/// What a successfully decoded event carries.
#[derive(Clone, PartialEq, Debug)]
pub enum EventData {
    /// A branch (Intel PT `branches` event or equivalent).
    Trace {
        /// Tracing switched on or off at this branch.
        change: Option<TraceStateChange>,
        /// The branch kind; `None` for a bare `tr strt`/`tr end`.
        kind: Option<Kind>,
        /// Where the branch came from ([`StringTable::location`]).
        src: LocationHandle,
        /// Where it went.
        dst: LocationHandle,
    },
    /// A core-to-bus ratio change (`cbr`), as a CPU frequency.
    Power {
        /// Frequency in MHz.
        freq_mhz: u32,
    },
    /// A sampled call stack (`cycles`, `cpu-clock`, …), **root first**.
    StackSample {
        /// Frames from the root (outermost caller) to the leaf, interned in the
        /// [`StringTable`] the event's names are in ([`StringTable::stack`]).
        callstack: StackHandle,
    },
    /// A sampled extra event (branch or cache miss) at a location.
    EventSample {
        /// Where it happened.
        location: Location,
        /// The sample period.
        count: u64,
        /// Which event.
        name: ExtraEvent,
    },
    /// A `ptwrite` payload.
    Ptwrite {
        /// Where it was written.
        location: Location,
        /// The payload.
        data: u64,
    },
    /// The event's thread got a name (perf's `PERF_RECORD_COMM`): at exec (the program's
    /// name, and then the thread is its process's only thread, tid = pid), by
    /// `prctl(PR_SET_NAME)`/`pthread_setname_np`, or when recording began (time 0).
    Comm {
        /// The new name, as the kernel keeps it (at most 15 bytes).
        name: Sym,
        /// Set by `exec`: the process now runs another program.
        exec: bool,
    },
    /// The event's thread (or process, when tid = pid) was created by `parent`
    /// (perf's `PERF_RECORD_FORK`); it carries the parent's name until it gets its own.
    Fork {
        /// The thread that called `fork`/`clone`.
        parent: Thread,
    },
    /// The stack the event's thread was in as it left the CPU (perf's
    /// `sched:sched_switch` tracepoint sampled with call stacks), **root first**: the
    /// function it waited in and its callers. It comes just before the
    /// [`EventData::Switch`] that says when the thread left; unlike a
    /// [`EventData::StackSample`] it is no sample of time on the CPU.
    SwitchOutStack {
        /// Frames from the root to the leaf, interned like a sample's
        /// ([`StringTable::stack`]).
        callstack: StackHandle,
    },
    /// The event's thread left the CPU (`out`) or came back to it (perf's
    /// `PERF_RECORD_SWITCH`, recorded with `--switch-events`): a sampled thread ran
    /// only between an `in` and the next `out`.
    Switch {
        /// Switched out (else in).
        out: bool,
        /// Switched out while still runnable (preempted), not because it blocked.
        preempt: bool,
    },
}

impl EventData {
    /// True for [`EventData::Comm`] and [`EventData::Fork`]: facts about a thread's
    /// name and parentage, not about what it ran, so they neither start a track nor
    /// move a thread's clock.
    pub fn is_task(&self) -> bool {
        matches!(self, EventData::Comm { .. } | EventData::Fork { .. })
    }

    /// True for what perf records beside the samples ([`EventData::is_task`] and
    /// [`EventData::Switch`]): alone they are no trace, and they do not decide when it
    /// starts.
    pub fn is_sideband(&self) -> bool {
        self.is_task() || matches!(self, EventData::Switch { .. })
    }
}

/// One decoded event: either data at a time on a thread, or a decode error.
#[derive(Clone, PartialEq, Debug)]
pub enum Event {
    /// A decoded event.
    Ok {
        /// Which thread.
        thread: Thread,
        /// perf time in nanoseconds.
        time: u64,
        /// The payload.
        data: EventData,
        /// perf marked it `(x)`: inside a TSX transaction.
        in_transaction: bool,
    },
    /// perf reported that it could not decode part of the trace.
    DecodeError {
        /// Which thread.
        thread: Thread,
        /// perf time in nanoseconds, when perf printed one.
        time: Option<u64>,
        /// The instruction pointer perf printed, `None` for `ip 0`.
        ip: Option<u64>,
        /// perf's message, e.g. `Overflow packet`.
        message: Sym,
    },
}

impl Event {
    /// The thread this event belongs to.
    pub fn thread(&self) -> Thread {
        match self {
            Event::Ok { thread, .. } | Event::DecodeError { thread, .. } => *thread,
        }
    }

    /// True if the event only names a thread or records its parent
    /// ([`EventData::is_task`]).
    pub fn is_task(&self) -> bool {
        matches!(self, Event::Ok { data, .. } if data.is_task())
    }

    /// True if perf recorded the event beside the samples ([`EventData::is_sideband`]).
    pub fn is_sideband(&self) -> bool {
        matches!(self, Event::Ok { data, .. } if data.is_sideband())
    }

    /// The event's time, if it has one.
    pub fn time(&self) -> Option<u64> {
        match self {
            Event::Ok { time, .. } => Some(*time),
            Event::DecodeError { time, .. } => *time,
        }
    }

    /// Shifts the event's time (if any) by `f`.
    pub fn map_time(&mut self, f: impl FnOnce(u64) -> u64) {
        match self {
            Event::Ok { time, .. } => *time = f(*time),
            Event::DecodeError { time: Some(t), .. } => *t = f(*t),
            Event::DecodeError { time: None, .. } => {}
        }
    }
}

/// Which privilege levels a recording traced.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default)]
pub enum TraceScope {
    /// User space only (`u`), the default.
    #[default]
    Userspace,
    /// User space and kernel (`uk`).
    UserspaceAndKernel,
    /// Kernel only (`k`).
    Kernel,
}

impl TraceScope {
    /// Parses `u`, `uk` or `k`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "u" => Some(TraceScope::Userspace),
            "uk" | "ku" => Some(TraceScope::UserspaceAndKernel),
            "k" => Some(TraceScope::Kernel),
            _ => None,
        }
    }

    /// perf's event modifier for this scope (`u`, `uk` or `k`), which [`TraceScope::parse`] reads back.
    pub fn modifier(self) -> &'static str {
        match self {
            TraceScope::Userspace => "u",
            TraceScope::UserspaceAndKernel => "uk",
            TraceScope::Kernel => "k",
        }
    }

    /// True if the kernel is traced.
    pub fn includes_kernel(self) -> bool {
        self != TraceScope::Userspace
    }

    /// Whether an address belongs to a privilege level in this scope: on x86-64 and
    /// arm64 the kernel lives in the upper half, where perf's callchains put it too.
    /// The last 4 KiB (perf's context markers, and the `-1` a failed user-space unwind
    /// ends with) count as user space, as they always did.
    pub fn includes_address(self, ip: u64) -> bool {
        let kernel = is_kernel_address(ip) && ip < (-4095i64) as u64;
        match self {
            TraceScope::Userspace => !kernel,
            TraceScope::UserspaceAndKernel => true,
            TraceScope::Kernel => kernel,
        }
    }
}

impl fmt::Display for TraceScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.modifier())
    }
}

/// True for an address in the upper half, where x86-64 and arm64 put the kernel.
pub fn is_kernel_address(ip: u64) -> bool {
    (ip as i64) < 0
}

/// Appends `v` as OCaml's `Int64.Hex.to_string` shows it: read as signed, `-0x…` when
/// negative. magic-trace names unknown addresses and trap addresses this way.
pub fn write_ocaml_int64_hex(out: &mut String, v: u64) {
    use std::fmt::Write;
    let signed = v as i64;
    // Writing to a String cannot fail.
    let _ = if signed < 0 {
        write!(out, "-0x{:x}", signed.unsigned_abs())
    } else {
        write!(out, "0x{signed:x}")
    };
}

/// `v` as OCaml's `Int64.Hex.to_string` shows it (see [`write_ocaml_int64_hex`]).
pub fn ocaml_int64_hex(v: u64) -> String {
    let mut s = String::new();
    write_ocaml_int64_hex(&mut s, v);
    s
}

/// Where a function starts in the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourcePosition {
    /// File name, if known.
    pub file: Option<String>,
    /// 1-based line.
    pub line: i64,
    /// Column, 0 when unknown.
    pub col: i64,
}

/// A trigger breakpoint hit, shown as a `hit SYMBOL` slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    /// The symbol the breakpoint was set on.
    pub symbol: String,
    /// perf time of the hit (ns).
    pub time: u64,
    /// Thread that hit it.
    pub tid: u32,
    /// Instruction pointer at the hit.
    pub ip: u64,
    /// Start time passed by the stop indicator (ns), when the symbol is the stop indicator.
    pub passed_time: u64,
    /// Value passed by the stop indicator.
    pub passed_value: i64,
    /// True when `symbol` is ptscope's stop indicator (its registers carry arguments).
    pub is_stop_indicator: bool,
}

/// Addresses of OCaml exception-handling code, from `.note.ocaml_eh`, ptscope's own
/// decoder (the instructions themselves) or a test case.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OcamlExceptionInfo {
    /// Sorted `(address, is_pushtrap)` pairs; `false` means poptrap.
    traps: Vec<(u64, bool)>,
    entertraps: Vec<u64>,
}

impl OcamlExceptionInfo {
    /// Builds the table from the three address lists.
    pub fn new(pushtraps: &[u64], poptraps: &[u64], entertraps: &[u64]) -> Self {
        let mut traps: Vec<(u64, bool)> = pushtraps
            .iter()
            .map(|&a| (a, true))
            .chain(poptraps.iter().map(|&a| (a, false)))
            .collect();
        // Stable sort keeps pushtraps before poptraps at an equal address, as the reference does.
        traps.sort_by_key(|&(a, _)| a);
        let mut entertraps = entertraps.to_vec();
        entertraps.sort_unstable();
        entertraps.dedup();
        OcamlExceptionInfo { traps, entertraps }
    }

    /// True if `addr` is the start of an exception handler.
    pub fn is_entertrap(&self, addr: u64) -> bool {
        self.entertraps.binary_search(&addr).is_ok()
    }

    /// The push/pop traps with `from <= addr <= to`, in address order (`true` = pushtrap).
    pub fn traps_in_range(&self, from: u64, to: u64) -> &[(u64, bool)] {
        let lo = self.traps.partition_point(|&(a, _)| a < from);
        let hi = self.traps.partition_point(|&(a, _)| a <= to);
        if lo < hi {
            &self.traps[lo..hi]
        } else {
            &[]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traps_in_range_matches_reference_cases() {
        let t = OcamlExceptionInfo::new(&[0, 5, 10], &[2, 100], &[50]);
        let r = |a, b| t.traps_in_range(a, b).to_vec();
        assert_eq!(r(0, 1), vec![(0, true)]);
        assert_eq!(r(0, 4), vec![(0, true), (2, false)]);
        assert_eq!(r(3, 7), vec![(5, true)]);
        assert_eq!(r(49, 100), vec![(100, false)]);
        assert_eq!(r(75, 101), vec![(100, false)]);
        assert!(r(75, 80).is_empty());
        assert!(r(150, 200).is_empty());
        assert!(r(10, 3).is_empty());
        assert!(t.is_entertrap(50) && !t.is_entertrap(51));
    }

    #[test]
    fn int64_hex_matches_ocaml() {
        assert_eq!(ocaml_int64_hex(0), "0x0");
        assert_eq!(ocaml_int64_hex(0x7f00), "0x7f00");
        assert_eq!(ocaml_int64_hex(0xffff_ffff_af00_1100), "-0x50ffef00");
        assert_eq!(ocaml_int64_hex(1 << 63), "-0x8000000000000000");
        let mut s = String::from("x ");
        write_ocaml_int64_hex(&mut s, 16);
        assert_eq!(s, "x 0x10");
    }

    #[test]
    fn interning_is_stable() {
        let mut s = StringTable::new();
        let a = s.intern("a");
        let b = s.intern("b");
        assert_eq!(s.intern("a"), a);
        assert_ne!(a, b);
        assert_eq!(s.get(b), "b");
        assert_eq!(s.lookup("c"), None);
        assert_eq!(s.display(Symbol::Untraced), "[untraced]");
        s.set_display(a, "A");
        assert_eq!(s.display(Symbol::FromPerf(a)), "A");
        assert_eq!(s.get(a), "a");
    }

    /// Locations that share a cache slot (same address, other symbol or offset; other
    /// addresses that hash alike) each keep their own handle, however they alternate.
    #[test]
    fn locations_are_interned_once_whatever_the_cache_holds() {
        let mut s = StringTable::new();
        let f = Symbol::FromPerf(s.intern("f"));
        let mut seen: FxHashMap<Location, LocationHandle> = FxHashMap::default();
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let loc = Location {
                ip: x % 9000,
                symbol: if x & 1 == 0 { f } else { Symbol::Unknown },
                offset: (x >> 20) % 3,
                dso: None,
            };
            let h = s.intern_location(loc);
            assert_eq!(*s.location(h), loc);
            assert_eq!(*seen.entry(loc).or_insert(h), h, "{loc:?}");
        }
        assert_eq!(s.location_count(), seen.len());
    }

    #[test]
    fn stacks_are_stored_once() {
        let mut s = StringTable::new();
        let f = Symbol::FromPerf(s.intern("f"));
        let g = Symbol::FromPerf(s.intern("g"));
        let loc = |ip, symbol| Location::new(ip, symbol, 0);
        let fg = [loc(1, f), loc(2, g)];
        let a = s.intern_stack(fg);
        let b = s.intern_stack([loc(1, f)]);
        let c = s.intern_stack([loc(2, g), loc(1, f)]);
        let empty = s.intern_stack([]);
        assert_eq!(s.intern_stack(fg), a);
        assert_eq!(s.intern_stack([]), empty);
        assert!(a != b && a != c && b != c && empty != a);
        assert_eq!(s.stack_count(), 4);
        assert_eq!(s.stack(a).copied().collect::<Vec<_>>(), fg);
        assert_eq!(s.stack(c).next_back(), Some(&loc(1, f)));
        assert_eq!(s.stack(empty).len(), 0);
        // Two stacks share their locations.
        assert_eq!(s.stack_handles(a)[0], s.stack_handles(b)[0]);
        assert_eq!(*s.location(s.stack_handles(c)[0]), loc(2, g));
    }
}

#[cfg(test)]
mod size_tests {
    /// Every event is moved through batches and channels several times; its size is
    /// a direct cost (the emulate backend's decode spent a fifth of its time in memmove
    /// when an event was 136 bytes; it is 104).
    #[test]
    fn an_event_stays_small() {
        let size = std::mem::size_of::<super::Event>();
        eprintln!(
            "Event: {size} bytes, Location: {}",
            std::mem::size_of::<super::Location>()
        );
        assert!(size <= 80, "Event grew to {size} bytes");
    }
}
