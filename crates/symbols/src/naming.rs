//! The naming step between decoding and stack reconstruction: names per *function* for
//! code perf could not name, and sampled call stacks cut where frame pointers were lost.
//!
//! Both decoders (perf script text and the dlfilter) give the same events, and this step
//! is a function of the events and the files on disk only, so both still give one trace.
//!
//! **Names.** perf names an address in a stripped binary `[unknown]`, which the decoders
//! turn into `[unknown @ ADDR (DSO)]`: one name per sampled address. For the frames of a
//! sampled call stack perf prints ADDR as an offset into the DSO's file, so the DSO's
//! [`FunctionRanges`] (debug file, else `.eh_frame`) give the function, and every address
//! in it gets the same name: the symbol's, or `gzip+0x1a2b0` after the FDE's start.
//!
//! **Cut stacks.** With `--callgraph fp`, code built without frame pointers (most of a
//! distribution: libc, CPython, gzip) leaves `rbp` holding data, and perf's walk reads
//! return addresses from it: ASCII text (`0x4341505f45434152`), negative numbers, 0. perf
//! finds such an address in no mapping of the process and prints it `[unknown]` with no
//! DSO. Everything from the first such caller outwards is invented, so the stack is cut
//! there and one [`STACK_CUT`] frame stands for what was lost.
//!
//! **Inlined calls.** perf is asked not to expand inlined calls (`perf script
//! --no-inline`: its `addr2line` children cost 80 times the rest of a decode, and could
//! hang); this step does it from DWARF instead ([`InlineInfo`], cached per address): a
//! frame whose address lies in code inlined from `step` and `mix` becomes the symbol's
//! frame with `step` and `mix` nested in it. Each frame an expansion adds carries, as its
//! address, where the inlined copy below it begins, so two samples in the same inlined
//! call keep one frame, and two calls of one inlined function are two.
//!
//! **Time in the kernel.** A trace of user space still shows the samples a thread spent
//! in a system call or a page fault: their kernel frames become one `[kernel: read]`-style
//! frame (see [`kernel_frame_name`]) on top of the user stack that entered the kernel, so
//! that time has a caller and a name instead of vanishing or showing kernel internals.

use std::path::Path;

use ptscope_event::{
    Event, EventData, Location, LocationHandle, ProcessStart, StackHandle, StringTable, Sym, Symbol,
};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::functions::FunctionRanges;
use crate::inline::InlineInfo;
use ptscope_perf_data::Mappings;

/// The frame that replaces the callers of a stack whose frame-pointer chain broke.
pub const STACK_CUT: &str = "[stack cut: frame pointers lost]";

/// The frame that replaces the callers of a stack perf unwound from a stack copy or
/// branch records (`--callgraph dwarf`/`lbr`) into an address in no mapping.
pub const STACK_CUT_UNWOUND: &str = "[stack cut: unwinding went astray]";

/// Stands for the callers of a sample taken in the kernel whose user stack perf could not
/// copy (the kernel records a 0-byte copy when it cannot read the stack at that moment:
/// seen for gzip writing into a pipe), so DWARF unwinding found only the user pc.
pub const STACK_CUT_NO_COPY: &str = "[stack cut: no user stack copied]";

/// Stands for the callers of a user-space sample of a DWARF recording whose unwinding
/// stopped at the sampled pc (in a function no thread starts in).
pub const STACK_CUT_STOPPED: &str = "[stack cut: unwinding stopped]";

/// Stands between a sampled leaf and the frame a frame-pointer walk found next when the
/// leaf had not set up its own frame: its caller is missing there.
pub const CALLER_LOST: &str = "[caller lost: no frame pointer here]";

/// Stands for the kernel part of a sampled stack in a user-space trace when the kernel
/// frames say nothing more specific (see [`kernel_frame_name`]).
pub const IN_KERNEL: &str = "[kernel]";

/// The frame for a sampled stack's kernel part inside an interrupt (see
/// [`kernel_frame_name`]).
pub const IN_INTERRUPT: &str = "[kernel: interrupt]";

/// Stands for the kernel part of a sampled stack in a system call whose handler's name
/// does not say which.
pub const IN_SYSCALL: &str = "[kernel: system call]";

/// What perf calls a DSO it could not find (the address is in no mapping).
const NO_DSO: &str = "[unknown]";

/// The table names are interned in, as this step needs it: a decoder that owns its
/// table can intern without giving out `&mut StringTable` (which may cost it its caches).
pub trait NameTable {
    /// The table, for reading.
    fn strings(&self) -> &StringTable;
    /// The handle of `name`, interning it if new.
    fn intern(&mut self, name: &str) -> Sym;
    /// The handle of the stack made of `frames` (root first), interning it if new.
    fn intern_stack(&mut self, frames: &[Location]) -> StackHandle;
    /// The handle of `loc`, interning it if new.
    fn intern_location(&mut self, loc: Location) -> LocationHandle;
    /// The raw string behind a handle.
    fn get(&self, sym: Sym) -> &str {
        self.strings().get(sym)
    }
    /// Appends a stack's frames, root first, to `out`.
    fn stack_frames(&self, stack: StackHandle, out: &mut Vec<Location>) {
        out.extend(self.strings().stack(stack));
    }
}

impl NameTable for StringTable {
    fn strings(&self) -> &StringTable {
        self
    }
    fn intern(&mut self, name: &str) -> Sym {
        StringTable::intern(self, name)
    }
    fn intern_stack(&mut self, frames: &[Location]) -> StackHandle {
        StringTable::intern_stack(self, frames.iter().copied())
    }
    fn intern_location(&mut self, loc: Location) -> LocationHandle {
        StringTable::intern_location(self, loc)
    }
}

/// Counts of what the step did, for the closing message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NamingStats {
    /// Sampled call stacks seen.
    pub stacks: u64,
    /// Stacks cut at a caller outside every mapping.
    pub cut: u64,
    /// Of those, stacks walked by frame pointers (the ones `--callgraph dwarf` fixes).
    pub cut_fp: u64,
    /// Frames given a function's name instead of their address's.
    pub named: u64,
    /// Frames in stripped code that no function range covers (they keep their address).
    pub unnamed: u64,
    /// Leaves sampled before they set up their frame: [`CALLER_LOST`] put above them.
    pub caller_lost: u64,
    /// Stacks sampled in the kernel whose kernel frames became one `[kernel: …]` frame.
    pub kernel_folded: u64,
    /// Frames of inlined calls added to sampled stacks from DWARF.
    pub inlined: u64,
}

/// The calls inlined at one address: each one's name and the file offset where its
/// inlined copy begins, outermost first.
type InlinedCalls = Box<[(Sym, u64)]>;

/// A function's interned name and where it starts (file offset or address).
type Named = (Sym, u64);

/// Per-Sym facts, cached: what kind of name it is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NameKind {
    Unchecked,
    /// A real name (or nothing this step changes).
    Named,
    /// `[unknown @ …]` in a file.
    UnknownInFile,
}

/// Names stripped code per function and cuts broken frame-pointer stacks; see the module
/// documentation. One per decode (its caches are keyed by the table's [`Sym`]s, so it
/// must always be given the same [`StringTable`]).
pub struct Namer {
    group: bool,
    cut: bool,
    marker: Option<Sym>,
    unwind_marker: Option<Sym>,
    lost_marker: Option<Sym>,
    /// Fold kernel frames into one (a user-space trace of sampled stacks).
    fold_kernel: bool,
    /// A kernel frame's name → the `[kernel: …]` frame it gives (or `None`: it says nothing).
    kernel_names: FxHashMap<Sym, Option<Sym>>,
    /// The plain [`IN_KERNEL`] frame, interned.
    in_kernel: Option<Sym>,
    /// The [`IN_SYSCALL`] frame, interned.
    in_syscall: Option<Sym>,
    /// The [`STACK_CUT_NO_COPY`] frame, interned.
    no_copy_marker: Option<Sym>,
    /// The [`STACK_CUT_STOPPED`] frame, interned.
    stopped_marker: Option<Sym>,
    /// (DSO, file offset of a leaf) → its frame was not set up there.
    frameless: FxHashMap<(Sym, u64), bool>,
    kinds: Vec<NameKind>,
    /// By DSO name; `None` when the file could not be read.
    files: FxHashMap<Sym, Option<FunctionRanges>>,
    /// (DSO, file offset) → the function's name and the offset of its start.
    found: FxHashMap<(Sym, u64), Option<Named>>,
    /// The current recording's mappings, for branches' absolute addresses.
    mappings: Option<Mappings>,
    /// (pid, DSO, address) → the function's name and the address of its start.
    found_abs: FxHashMap<(Option<u32>, Sym, u64), Option<Named>>,
    /// (pid, branch end's handle) → the handle it is named as, direct-mapped
    /// ([`BRANCH_END_BITS`]): every branch names its two ends, nearly always ones seen
    /// just before, and looking each up again (its location copied, its name's kind
    /// and the address map consulted) was most of the naming step's time.
    branch_ends: Box<[(Option<u32>, u32, u32)]>,
    stats: NamingStats,
    /// A sampled stack's frames while they are changed.
    frames: Vec<Location>,
    /// Expand inlined calls from DWARF.
    inline: bool,
    /// By DSO name: its DWARF, `None` when it has none (or the file could not be read).
    inline_files: FxHashMap<Sym, Option<InlineInfo>>,
    /// (DSO, file offset looked up) → the calls inlined there (`None`: none).
    inlined: FxHashMap<(Sym, u64), Option<InlinedCalls>>,
    /// Processes whose events were named since the mappings were set (for
    /// [`Namer::process_starts`]), and the last one seen (most events repeat it).
    pids: FxHashSet<u32>,
    last_pid: Option<u32>,
}

/// log2 of [`Namer`]'s branch-end cache's slots.
const BRANCH_END_BITS: u32 = 12;

impl Namer {
    /// A step that names stripped code per function (`group`) and cuts broken
    /// frame-pointer stacks (`cut`).
    pub fn new(group: bool, cut: bool) -> Self {
        Namer {
            group,
            cut,
            marker: None,
            unwind_marker: None,
            lost_marker: None,
            fold_kernel: false,
            kernel_names: FxHashMap::default(),
            in_kernel: None,
            in_syscall: None,
            no_copy_marker: None,
            stopped_marker: None,
            frameless: FxHashMap::default(),
            kinds: Vec::new(),
            files: FxHashMap::default(),
            found: FxHashMap::default(),
            mappings: None,
            found_abs: FxHashMap::default(),
            branch_ends: vec![(None, u32::MAX, 0); 1 << BRANCH_END_BITS].into_boxed_slice(),
            stats: NamingStats::default(),
            frames: Vec::new(),
            inline: false,
            inline_files: FxHashMap::default(),
            inlined: FxHashMap::default(),
            pids: FxHashSet::default(),
            last_pid: None,
        }
    }

    /// Whether sampled frames in code inlined from other functions get those functions
    /// as frames of their own (from the files' DWARF; only with mappings, as names). For
    /// recordings decoded with `perf script --no-inline`: perf's own expansion would
    /// otherwise come twice.
    pub fn set_inline(&mut self, inline: bool) {
        self.inline = inline;
    }

    /// The mappings and build ids of the recording (`perf.data`) whose events come next
    /// (see [`Mappings::read`]). Names are given only with them: perf script text may
    /// come from another machine, whose files are not the ones here; and a file whose
    /// build id differs from the one perf recorded was replaced since, so its functions
    /// are not named either.
    pub fn set_mappings(&mut self, mappings: Option<Mappings>) {
        self.mappings = mappings;
        self.pids.clear();
        self.last_pid = None;
        self.found_abs.clear();
        self.branch_ends.fill((None, u32::MAX, 0));
    }

    /// Whether sampled stacks' kernel frames become one `[kernel: …]` frame: for a trace
    /// of user space, which still shows where a thread's time in the kernel went.
    pub fn set_fold_kernel(&mut self, fold: bool) {
        self.fold_kernel = fold;
    }

    fn grouping(&self) -> bool {
        self.group && self.mappings.is_some()
    }

    /// What was done so far.
    pub fn stats(&self) -> NamingStats {
        self.stats
    }

    /// The one-line notice for a run where most sampled stacks were cut, if it was one.
    pub fn cut_notice(&self) -> Option<String> {
        let s = self.stats;
        (s.stacks > 0 && s.cut_fp * 2 > s.stacks).then(|| {
            format!(
                "{} of {} sampled call stacks ({}%) reached code without frame pointers and were \
                 cut there (their callers show as `{STACK_CUT}`); record with --callgraph dwarf \
                 for whole stacks",
                s.cut_fp,
                s.stacks,
                s.cut_fp * 100 / s.stacks
            )
        })
    }

    /// Renames and cuts `event`'s locations in place, interning new names in `strings`.
    pub fn apply(&mut self, event: &mut Event, strings: &mut impl NameTable) {
        let Event::Ok { data, thread, .. } = event else {
            return;
        };
        let pid = thread.pid;
        if pid != self.last_pid {
            self.last_pid = pid;
            self.pids.extend(pid);
        }
        let switch_out = matches!(data, EventData::SwitchOutStack { .. });
        let handle = match data {
            EventData::StackSample { callstack } | EventData::SwitchOutStack { callstack } => {
                callstack
            }
            EventData::Trace { src, dst, .. } => {
                if self.grouping() {
                    for h in [src, dst] {
                        *h = self.branch_end(pid, *h, strings);
                    }
                }
                return;
            }
            EventData::EventSample { location, .. } | EventData::Ptwrite { location, .. } => {
                if self.grouping() {
                    self.name_absolute(pid, location, strings);
                }
                return;
            }
            _ => return,
        };
        self.stats.stacks += 1;
        // The stack is interned: its frames are changed in a copy, interned again after.
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        strings.stack_frames(*handle, &mut frames);
        let callstack = &mut frames;
        // The frames after the user-space leaf (the `[kernel: …]` frame): the checks below
        // are about the user stack, whose leaf is the sampled user pc.
        let mut tail = usize::from(self.fold_kernel && self.fold_kernel_frames(callstack, strings));
        // A thread preempted as an interrupt returned to user space left the CPU from
        // the interrupt's exit path: the time off CPU belongs to the user frame it was
        // running, which goes on after it (as a sample there would show it).
        if switch_out && tail == 1 {
            let folded = callstack.last().map(|l| l.symbol);
            if matches!(folded, Some(Symbol::FromPerf(s)) if strings.get(s) == IN_INTERRUPT) {
                callstack.pop();
                tail = 0;
            }
        }
        self.mark_missing_copy(callstack, tail, strings);
        if self.cut {
            self.cut_stack(callstack, tail, strings);
        }
        if self.grouping()
            && self
                .mappings
                .as_ref()
                .is_some_and(Mappings::frame_pointer_stacks)
        {
            self.mark_lost_caller(callstack, tail, strings);
        }
        if self.grouping() {
            for loc in callstack.iter_mut() {
                self.name(loc, strings);
            }
            if self.inline {
                self.expand_inlined(callstack, tail, strings);
            }
        }
        *handle = strings.intern_stack(callstack);
        self.frames = frames;
    }

    /// Replaces the callers from the first one outside every mapping (root first: the
    /// last such frame before the leaf's side) by one [`STACK_CUT`] frame.
    /// `tail` frames after the user-space leaf are left alone.
    fn cut_stack(
        &mut self,
        callstack: &mut Vec<Location>,
        tail: usize,
        strings: &mut impl NameTable,
    ) {
        // perf ends a walk that reached the true root with a 0 or -1 "return address"
        // (DWARF unwinding past `_start`; `rbp` zeroed by `_start`): the end of the
        // stack, not a break in it.
        if callstack.len() >= 2
            && matches!(callstack[0].ip, 0 | u64::MAX)
            && is_unmapped(&callstack[0], strings)
        {
            callstack.remove(0);
        }
        let n = callstack.len().saturating_sub(tail);
        if n < 2 {
            return;
        }
        // The leaf is the sampled pc itself, never read from a frame; the first bad
        // caller, walking out from it, is where the chain broke.
        let Some(bad) = (0..n - 1)
            .rev()
            .find(|&i| is_unmapped(&callstack[i], strings))
        else {
            return;
        };
        // Stacks perf unwound otherwise (DWARF, LBR) lost their callers to that, not to
        // missing frame pointers.
        let marker = if self.frame_pointer_stacks() {
            self.stats.cut_fp += 1;
            *self.marker.get_or_insert_with(|| strings.intern(STACK_CUT))
        } else {
            *self
                .unwind_marker
                .get_or_insert_with(|| strings.intern(STACK_CUT_UNWOUND))
        };
        callstack.drain(..bad);
        callstack[0] = Location::new(0, Symbol::FromPerf(marker), 0);
        self.stats.cut += 1;
    }

    /// Replaces a sampled stack's kernel frames by one frame named after what the kernel
    /// was doing for the thread (see [`kernel_frame_name`]), kept where the first of them
    /// was: above the user frame that entered the kernel.
    /// True if it did (the stack then ends with that frame).
    fn fold_kernel_frames(
        &mut self,
        callstack: &mut Vec<Location>,
        strings: &mut impl NameTable,
    ) -> bool {
        let kernel = |l: &Location| !ptscope_event::TraceScope::Userspace.includes_address(l.ip);
        let Some(first) = callstack.iter().position(kernel) else {
            return false;
        };
        let mut marker = None;
        for loc in callstack[first..].iter().filter(|l| kernel(l)) {
            let Symbol::FromPerf(sym) = loc.symbol else {
                continue;
            };
            let named = *self
                .kernel_names
                .entry(sym)
                .or_insert_with(|| kernel_frame_name(strings.get(sym)).map(|n| strings.intern(&n)));
            // The outermost telling frame: the system call, not a fault taken inside it.
            if named.is_some() {
                marker = named;
                break;
            }
        }
        let marker = match marker {
            Some(m) => m,
            None => {
                // A system call whose handler has no telling name.
                let syscall = callstack[first..].iter().any(|l| {
                    kernel(l)
                        && matches!(l.symbol, Symbol::FromPerf(sym)
                            if strings.get(sym).starts_with("do_syscall_64")
                                || strings.get(sym).starts_with("entry_SYSCALL"))
                });
                if syscall {
                    *self
                        .in_syscall
                        .get_or_insert_with(|| strings.intern(IN_SYSCALL))
                } else {
                    *self
                        .in_kernel
                        .get_or_insert_with(|| strings.intern(IN_KERNEL))
                }
            }
        };
        callstack.retain(|l| !kernel(l));
        let at = first.min(callstack.len());
        callstack.insert(at, Location::new(0, Symbol::FromPerf(marker), 0));
        self.stats.kernel_folded += 1;
        at + 1 == callstack.len()
    }

    /// Puts a cut marker under a sample of a DWARF recording whose user part is the pc
    /// alone, in no function a thread starts in: its callers are unknown, not absent.
    /// Taken in the kernel (`tail` is its `[kernel: …]` frame), the stack was not copied
    /// ([`STACK_CUT_NO_COPY`]); in user space, unwinding stopped at once
    /// ([`STACK_CUT_STOPPED`]: a 0-byte copy too, or code without unwind tables).
    fn mark_missing_copy(
        &mut self,
        callstack: &mut Vec<Location>,
        tail: usize,
        strings: &mut impl NameTable,
    ) {
        let dwarf = self
            .mappings
            .as_ref()
            .is_some_and(|m| !m.frame_pointer_stacks());
        if !dwarf || callstack.len() != 1 + tail {
            return;
        }
        if let Symbol::FromPerf(sym) = callstack[0].symbol {
            let name = strings.get(sym);
            let root = [
                "_start",
                "_dl_start",
                "clone",
                "__clone",
                "start_thread",
                "thread_start",
            ]
            .iter()
            .any(|r| name.starts_with(r));
            if root || name.starts_with('[') {
                return;
            }
        }
        let m = if tail == 1 {
            *self
                .no_copy_marker
                .get_or_insert_with(|| strings.intern(STACK_CUT_NO_COPY))
        } else {
            *self
                .stopped_marker
                .get_or_insert_with(|| strings.intern(STACK_CUT_STOPPED))
        };
        callstack.insert(0, Location::new(0, Symbol::FromPerf(m), 0));
        self.stats.cut += 1;
    }

    /// True unless the recording says its stacks were unwound another way (perf script
    /// text does not say: `--callgraph fp` is where broken stacks come from).
    fn frame_pointer_stacks(&self) -> bool {
        self.mappings
            .as_ref()
            .is_none_or(Mappings::frame_pointer_stacks)
    }

    /// Inserts [`CALLER_LOST`] above a leaf sampled where it had no frame of its own
    /// (see [`FunctionRanges::frame_set_up_at`]): the frame found next is its caller's
    /// caller.
    fn mark_lost_caller(
        &mut self,
        callstack: &mut Vec<Location>,
        tail: usize,
        strings: &mut impl NameTable,
    ) {
        let n = callstack.len().saturating_sub(tail);
        if n < 2 {
            return;
        }
        let leaf = callstack[n - 1];
        let above = callstack[n - 2].symbol;
        if self.marker.is_some_and(|m| above == Symbol::FromPerf(m)) {
            return;
        }
        let Some(dso) = leaf.dso else { return };
        let frameless = match self.frameless.get(&(dso, leaf.ip)) {
            Some(f) => *f,
            None => {
                let f = self
                    .ranges(dso, strings)
                    .and_then(|r| r.frame_set_up_at(r.address_of_offset(leaf.ip)?))
                    == Some(false);
                self.frameless.insert((dso, leaf.ip), f);
                f
            }
        };
        if frameless {
            let m = *self
                .lost_marker
                .get_or_insert_with(|| strings.intern(CALLER_LOST));
            callstack.insert(n - 1, Location::new(0, Symbol::FromPerf(m), 0));
            self.stats.caller_lost += 1;
        }
    }

    /// Adds the calls inlined at each user frame as frames of their own, nested in it
    /// (see the module documentation). `tail` frames after the user-space leaf are left
    /// alone; callers are looked up at their return address less one (the call).
    fn expand_inlined(
        &mut self,
        callstack: &mut Vec<Location>,
        tail: usize,
        strings: &mut impl NameTable,
    ) {
        let n = callstack.len().saturating_sub(tail);
        // Most stacks hold no inlined call: change nothing until one does.
        let mut first = None;
        for (i, loc) in callstack[..n].iter().enumerate() {
            let leaf = i + 1 == n;
            if self.inlined_calls(loc, leaf, strings).is_some() {
                first = Some(i);
                break;
            }
        }
        let Some(first) = first else { return };
        let old = std::mem::take(callstack);
        callstack.extend_from_slice(&old[..first]);
        for (i, loc) in old.iter().enumerate().skip(first) {
            let calls = if i < n {
                self.inlined_calls(loc, i + 1 == n, strings)
            } else {
                None
            };
            let Some(calls) = calls else {
                callstack.push(*loc);
                continue;
            };
            // The symbol's frame, then each inlined call; every frame's address says
            // which call it is in (the next one's start), the innermost keeps the pc.
            let start = loc.ip.wrapping_sub(loc.offset);
            let mut outer = *loc;
            outer.ip = calls[0].1;
            outer.offset = outer.ip.wrapping_sub(start);
            callstack.push(outer);
            for (j, &(name, entry)) in calls.iter().enumerate() {
                let ip = calls.get(j + 1).map_or(loc.ip, |c| c.1);
                callstack.push(Location {
                    ip,
                    symbol: Symbol::FromPerf(name),
                    offset: ip.wrapping_sub(entry),
                    dso: loc.dso,
                });
            }
            self.stats.inlined += calls.len() as u64;
        }
    }

    /// The calls inlined where `loc` (a sampled frame: a file offset in its DSO) is, if
    /// any; `leaf` frames are looked up at their pc, callers at the call before the
    /// return address.
    fn inlined_calls(
        &mut self,
        loc: &Location,
        leaf: bool,
        strings: &mut impl NameTable,
    ) -> Option<InlinedCalls> {
        let dso = loc.dso?;
        if loc.ip == 0 || !ptscope_event::TraceScope::Userspace.includes_address(loc.ip) {
            return None;
        }
        let probe = if leaf { loc.ip } else { loc.ip - 1 };
        if let Some(found) = self.inlined.get(&(dso, probe)) {
            return found.clone();
        }
        let found = self.look_up_inlined(dso, probe, strings);
        self.inlined.insert((dso, probe), found.clone());
        found
    }

    fn look_up_inlined(
        &mut self,
        dso: Sym,
        probe: u64,
        strings: &mut impl NameTable,
    ) -> Option<InlinedCalls> {
        let mappings = &self.mappings;
        let info = self
            .inline_files
            .entry(dso)
            .or_insert_with(|| {
                the_recorded_file(dso, strings, mappings, |p| {
                    let i = InlineInfo::load(p).ok().flatten()?;
                    let id = i.build_id().map(<[u8]>::to_vec);
                    Some((i, id))
                })
            })
            .as_ref()?;
        let addr = info.address_of_offset(probe)?;
        let calls = info.inlined_at(addr);
        if calls.is_empty() {
            return None;
        }
        let mut out = Vec::with_capacity(calls.len());
        for c in calls {
            let entry = info.offset_of_address(c.entry)?;
            out.push((strings.intern(&c.name), entry));
        }
        Some(out.into_boxed_slice())
    }

    /// The function ranges of the DSO named `dso`, loaded once.
    fn ranges(&mut self, dso: Sym, strings: &impl NameTable) -> Option<&FunctionRanges> {
        let mappings = &self.mappings;
        self.files
            .entry(dso)
            .or_insert_with(|| {
                the_recorded_file(dso, strings, mappings, |p| {
                    let r = FunctionRanges::load(p).ok()?;
                    let id = r.build_id().map(<[u8]>::to_vec);
                    Some((r, id))
                })
            })
            .as_ref()
    }

    fn kind(&mut self, sym: Sym, strings: &impl NameTable) -> NameKind {
        let i = sym.0 as usize;
        if i >= self.kinds.len() {
            self.kinds
                .resize((i + 1).max(self.kinds.len() * 2), NameKind::Unchecked);
        }
        if self.kinds[i] == NameKind::Unchecked {
            self.kinds[i] = if strings.get(sym).starts_with("[unknown @ ") {
                NameKind::UnknownInFile
            } else {
                NameKind::Named
            };
        }
        self.kinds[i]
    }

    fn name(&mut self, loc: &mut Location, strings: &mut impl NameTable) {
        let Symbol::FromPerf(sym) = loc.symbol else {
            return;
        };
        let Some(dso) = loc.dso else { return };
        if self.kind(sym, strings) != NameKind::UnknownInFile {
            return;
        }
        let key = (dso, loc.ip);
        let found = match self.found.get(&key) {
            Some(f) => *f,
            None => {
                let f = self.lookup(dso, loc.ip, strings);
                self.found.insert(key, f);
                f
            }
        };
        match found {
            Some((name, start)) => {
                loc.symbol = Symbol::FromPerf(name);
                loc.offset = loc.ip.wrapping_sub(start);
                self.stats.named += 1;
            }
            None => self.stats.unnamed += 1,
        }
    }

    /// A branch end `h` of process `pid`, named (see [`Namer::name_absolute`]). Cached
    /// per process and handle, not per handle: the same address may be another function
    /// in another process.
    #[inline]
    fn branch_end(
        &mut self,
        pid: Option<u32>,
        h: LocationHandle,
        strings: &mut impl NameTable,
    ) -> LocationHandle {
        let key = u64::from(h.0) | (u64::from(pid.unwrap_or(u32::MAX)) << 32);
        let slot = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - BRANCH_END_BITS)) as usize;
        let (p, k, named) = self.branch_ends[slot];
        if k == h.0 && p == pid {
            return LocationHandle(named);
        }
        let mut loc = *strings.strings().location(h);
        let named = if self.name_absolute(pid, &mut loc, strings) {
            strings.intern_location(loc)
        } else {
            h
        };
        self.branch_ends[slot] = (pid, h.0, named.0);
        named
    }

    /// Names a location whose `ip` is the process's own address (a branch's); true if
    /// it did.
    fn name_absolute(
        &mut self,
        pid: Option<u32>,
        loc: &mut Location,
        strings: &mut impl NameTable,
    ) -> bool {
        let Symbol::FromPerf(sym) = loc.symbol else {
            return false;
        };
        let Some(dso) = loc.dso else { return false };
        if self.kind(sym, strings) != NameKind::UnknownInFile {
            return false;
        }
        match self.function_at_address(pid, dso, loc.ip, strings) {
            Some((name, start)) => {
                loc.symbol = Symbol::FromPerf(name);
                loc.offset = loc.ip.wrapping_sub(start);
                true
            }
            None => false,
        }
    }

    /// The name this step gives the code at `ip`, an address of process `pid` in the
    /// file `dso` (as perf names it), and the address where that function starts; `None`
    /// where it names nothing (no mappings given, no function range covers `ip`).
    ///
    /// What a branch into a stripped function is called in the trace: a scorer names
    /// its true stacks with it to compare them with the trace's.
    pub fn function_at_address(
        &mut self,
        pid: Option<u32>,
        dso: Sym,
        ip: u64,
        strings: &mut impl NameTable,
    ) -> Option<(Sym, u64)> {
        if !self.grouping() {
            return None;
        }
        let key = (pid, dso, ip);
        if let Some(f) = self.found_abs.get(&key) {
            return *f;
        }
        let offset = self
            .mappings
            .as_ref()
            .and_then(|m| m.file_offset(pid, strings.get(dso), ip));
        let f = offset.and_then(|o| {
            let (name, start) = self.lookup(dso, o, strings)?;
            Some((name, ip.wrapping_sub(o.wrapping_sub(start))))
        });
        self.found_abs.insert(key, f);
        f
    }

    /// How each process whose events this step named (since the mappings were set)
    /// started its program, by pid: see [`Namer::process_start`].
    pub fn process_starts(&mut self, strings: &mut impl NameTable) -> Vec<(u32, ProcessStart)> {
        let mut pids: Vec<u32> = self.pids.iter().copied().collect();
        pids.sort_unstable();
        pids.into_iter()
            .filter_map(|pid| Some((pid, self.process_start(pid, strings)?)))
            .collect()
    }

    /// The location where process `pid`'s program starts (its ELF header's `e_entry`, at
    /// the address the process mapped it), named as a branch there is named: the file's
    /// own symbol (`_start`), else this step's name for the function (`sqlite3+0xa780`
    /// in a stripped program). The trace shows it only in ld.so's jump to it; a stack
    /// writer that lost that jump to a decode error but sees `__libc_start_main` knows
    /// the program's entry called it, and with this can name that frame as the trace
    /// would have. `None` without mappings, or when the program's file cannot be read
    /// or is not the one recorded.
    pub fn process_entry(
        &mut self,
        pid: u32,
        strings: &mut impl NameTable,
    ) -> Option<LocationHandle> {
        self.process_start(pid, strings).map(|s| s.entry)
    }

    /// How process `pid` started its program: its entry ([`Namer::process_entry`]); the
    /// program's `main`, when the entry is glibc's `_start`, which passes `main` to
    /// `__libc_start_main` in `rdi` (`lea rdi,[rip+main]` in a PIE, `mov rdi,main` in
    /// a program at a fixed address) before its one call; and the C library's
    /// `__libc_start_call_main` (glibc 2.34 and later), which calls `main`, when the
    /// library's symbols name it. Each is named as a branch there is named.
    pub fn process_start(
        &mut self,
        pid: u32,
        strings: &mut impl NameTable,
    ) -> Option<ProcessStart> {
        if !self.grouping() {
            return None;
        }
        let maps = self.mappings.as_ref()?;
        // The first file the process mapped that is a program: after an interpreter run
        // by hand (`ld.so ./prog`), before `libc.so.6` (a program too, see
        // `Elf::program_entry`). A file that cannot be read ends the search: what
        // follows it may be a library.
        let mut found = None;
        for path in maps.files_of(pid) {
            let file = crate::MappedFile::open_regular(path).ok()?;
            let elf = file.elf().ok()?;
            let Some(entry) = elf.program_entry() else {
                continue;
            };
            let recorded = maps.build_id(path);
            if recorded.is_some() && elf.build_id() != recorded {
                return None;
            }
            let offset = elf.offset_of_address(entry)?;
            // The symbols starting at the entry (`_start`) and at `main`, by raw name as
            // perf shows them: not `Elf::symbols`, which demangles the whole table
            // (seconds for a large program, on every decode).
            let starts = elf.function_starts();
            let own = |at: u64| {
                (starts.iter())
                    .find(|&&(_, a)| a == at)
                    .map(|&(name, _)| name.to_owned())
            };
            let code = usize::try_from(offset)
                .ok()
                .and_then(|o| file.bytes().get(o..))
                .unwrap_or_default();
            let main = main_passed_by_start(code, entry).and_then(|m| {
                let off = elf.offset_of_address(m)?;
                Some((off, maps.address_of_offset(pid, path, off)?, own(m)))
            });
            let ip = maps.address_of_offset(pid, path, offset)?;
            found = Some((path.to_owned(), (offset, ip, own(entry)), main));
            break;
        }
        let (path, entry, main) = found?;
        let dso = strings.intern(&path);
        let entry = self.function_location(dso, entry, strings, false)?;
        // `main` must start a function this step knows, or the bytes were not `_start`'s.
        let main = main.and_then(|m| self.function_location(dso, m, strings, true));
        let main_caller = main.and_then(|_| self.libc_start_call_main(pid, strings));
        Some(ProcessStart {
            entry,
            main,
            main_caller,
        })
    }

    /// The location of the function starting at file offset `offset` of `dso`, mapped at
    /// `ip`: named `own` (its symbol in the file) if it has one, else as this step names
    /// the function there (`None` when it names none, or, with `start`, when that
    /// function does not start at `offset`).
    fn function_location(
        &mut self,
        dso: Sym,
        (offset, ip, own): (u64, u64, Option<String>),
        strings: &mut impl NameTable,
        start: bool,
    ) -> Option<LocationHandle> {
        let (name, off) = match own {
            Some(name) => (strings.intern(&name), 0),
            None => {
                let (name, at) = self.lookup(dso, offset, strings)?;
                (name, offset.wrapping_sub(at))
            }
        };
        if start && off != 0 {
            return None;
        }
        Some(strings.intern_location(Location {
            ip,
            symbol: Symbol::FromPerf(name),
            offset: off,
            dso: Some(dso),
        }))
    }

    /// glibc's `__libc_start_call_main` in the `libc.so.*` process `pid` mapped, if that
    /// library's symbols (its debug file's, it is a local symbol) name it.
    fn libc_start_call_main(
        &mut self,
        pid: u32,
        strings: &mut impl NameTable,
    ) -> Option<LocationHandle> {
        const NAME: &str = "__libc_start_call_main";
        let maps = self.mappings.as_ref()?;
        let libc = (maps.files_of(pid).into_iter())
            .find(|p| {
                p.rsplit('/')
                    .next()
                    .is_some_and(|f| f.starts_with("libc.so"))
            })?
            .to_owned();
        let dso = strings.intern(&libc);
        let offset = self.ranges(dso, strings)?.offset_of_function(NAME)?;
        let ip = self
            .mappings
            .as_ref()?
            .address_of_offset(pid, &libc, offset)?;
        let name = strings.intern(NAME);
        Some(strings.intern_location(Location {
            ip,
            symbol: Symbol::FromPerf(name),
            offset: 0,
            dso: Some(dso),
        }))
    }

    /// The function holding file offset `offset` of the DSO `dso`: its interned name and
    /// the file offset of its start.
    fn lookup(
        &mut self,
        dso: Sym,
        offset: u64,
        strings: &mut impl NameTable,
    ) -> Option<(Sym, u64)> {
        let ranges = self.ranges(dso, strings)?;
        let addr = ranges.address_of_offset(offset)?;
        let f = ranges.function_at(addr)?;
        let start = offset.wrapping_sub(addr - f.start);
        let name = f.name.into_owned();
        Some((strings.intern(&name), start))
    }
}

/// The link-time address of `main` that glibc's `_start` at `entry` (its code from
/// `code`) passes to `__libc_start_main` in `rdi`: `lea rdi,[rip+X]` (`48 8d 3d`, a PIE)
/// or `mov rdi,X` / `mov edi,X` (`48 c7 c7`, `bf`: a program at a fixed address), the
/// last such before the first call. `_start` sets up the other arguments with short
/// moves, pushes and `xor`s; the search stops at the first call or after 64 bytes, and
/// the caller checks that a function starts there.
pub fn main_passed_by_start(code: &[u8], entry: u64) -> Option<u64> {
    let code = &code[..code.len().min(64)];
    let rel = |at: usize| {
        let b: [u8; 4] = code.get(at..at + 4)?.try_into().ok()?;
        Some(i32::from_le_bytes(b))
    };
    let mut main = None;
    let mut i = 0;
    while i < code.len() {
        match code[i..] {
            // `call rel32`, `call [rip+X]`: `__libc_start_main`.
            [0xe8, ..] | [0xff, 0x15, ..] => break,
            [0x48, 0x8d, 0x3d, ..] => {
                let d = rel(i + 3)?;
                main = Some((entry + i as u64 + 7).wrapping_add_signed(i64::from(d)));
                i += 7;
            }
            [0x48, 0xc7, 0xc7, ..] => {
                main = Some(i64::from(rel(i + 3)?) as u64);
                i += 7;
            }
            [0xbf, ..] => {
                main = Some(u64::from(rel(i + 1)? as u32));
                i += 5;
            }
            _ => i += 1,
        }
    }
    main
}

/// What `load` reads from the file perf named `dso`, if it is the file that was
/// recorded: `[vdso]`, `//anon`, `[unknown]` and JIT maps have no ELF file to read, and a
/// file whose build id differs from the one perf recorded was replaced since. `load`
/// returns what it read and the file's build id.
fn the_recorded_file<T>(
    dso: Sym,
    strings: &impl NameTable,
    mappings: &Option<Mappings>,
    load: impl FnOnce(&Path) -> Option<(T, Option<Vec<u8>>)>,
) -> Option<T> {
    let path = strings.get(dso);
    if !path.starts_with('/') || path.starts_with("//") {
        return None;
    }
    let recorded = mappings.as_ref().and_then(|m| m.build_id(path));
    let (read, id) = load(Path::new(path))?;
    (recorded.is_none() || id.as_deref() == recorded).then_some(read)
}

/// True for a frame perf found in no mapping of the process.
/// The `[kernel: …]` name a kernel function gives the time under it, if it tells what
/// the kernel was doing for the thread: `__x64_sys_read` → `[kernel: read]` (a system
/// call), `asm_exc_page_fault` → `[kernel: page fault]`, `asm_sysvec_apic_timer_interrupt`
/// → `[kernel: interrupt]`.
pub fn kernel_frame_name(function: &str) -> Option<String> {
    // perf may print a kernel symbol with an offset or module suffix: keep the name.
    let f = function.split(['+', ' ', '\t']).next().unwrap_or(function);
    for prefix in [
        "__x64_sys_",
        "__ia32_sys_",
        "__se_sys_",
        "__do_sys_",
        "__arm64_sys_",
        // The handler itself, when the kernel calls it without the wrapper (`ksys_read`).
        "ksys_",
    ] {
        if let Some(call) = f.strip_prefix(prefix) {
            if !call.is_empty() {
                return Some(format!("[kernel: {call}]"));
            }
        }
    }
    if matches!(
        f,
        "asm_exc_page_fault" | "exc_page_fault" | "do_user_addr_fault"
    ) {
        return Some("[kernel: page fault]".into());
    }
    if f.starts_with("asm_sysvec_") || f.starts_with("asm_common_interrupt") {
        return Some(IN_INTERRUPT.into());
    }
    None
}

fn is_unmapped(loc: &Location, strings: &impl NameTable) -> bool {
    // Only perf's explicit `[unknown]` DSO: without a DSO field (perf script text
    // printed without `dso`) nothing is known about the mapping.
    matches!(loc.symbol, Symbol::FromPerf(_) | Symbol::Unknown)
        && loc.dso.is_some_and(|d| strings.get(d) == NO_DSO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptscope_event::Thread;

    /// glibc's `_start` as Debian 12's sqlite3 has it (a PIE: `lea rdi,[rip-0x192b]` at
    /// 0xa794, so `main` is at 0xa79b - 0x192b = 0x8e70), and as a program at a fixed
    /// address has it (`mov rdi,0x401136`); code that passes nothing before its call
    /// names no `main`.
    #[test]
    fn main_is_what_start_passes_to_libc_start_main() {
        let pie = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x31, 0xed, 0x49, 0x89, 0xd1, 0x5e, 0x48, 0x89, 0xe2, 0x48,
            0x83, 0xe4, 0xf0, 0x50, 0x54, 0x45, 0x31, 0xc0, 0x31, 0xc9, 0x48, 0x8d, 0x3d, 0xd5,
            0xe6, 0xff, 0xff, 0xff, 0x15, 0x47, 0x08, 0x04, 0x00, 0xf4,
        ];
        assert_eq!(main_passed_by_start(&pie, 0xa77c), Some(0x8e70));
        let fixed = [
            0x31, 0xed, 0x49, 0x89, 0xd1, 0x5e, 0x48, 0x89, 0xe2, 0x48, 0x83, 0xe4, 0xf0, 0x50,
            0x54, 0x45, 0x31, 0xc0, 0x31, 0xc9, 0x48, 0xc7, 0xc7, 0x36, 0x11, 0x40, 0x00, 0xff,
            0x15, 0x00, 0x00, 0x00, 0x00, 0xf4,
        ];
        assert_eq!(main_passed_by_start(&fixed, 0x401040), Some(0x401136));
        let no_main = [
            0x31, 0xed, 0xe8, 0x00, 0x00, 0x00, 0x00, 0x48, 0x8d, 0x3d, 1, 0, 0, 0,
        ];
        assert_eq!(main_passed_by_start(&no_main, 0x1000), None);
    }

    fn sample(strings: &mut StringTable, frames: &[(&str, Option<&str>)]) -> Event {
        let callstack = locations(strings, frames);
        stack_sample(strings, callstack)
    }

    fn stack_sample(strings: &mut StringTable, callstack: Vec<Location>) -> Event {
        Event::Ok {
            thread: Thread::default(),
            time: 1,
            in_transaction: false,
            data: EventData::StackSample {
                callstack: strings.intern_stack(callstack),
            },
        }
    }

    fn locations(strings: &mut StringTable, frames: &[(&str, Option<&str>)]) -> Vec<Location> {
        frames
            .iter()
            .enumerate()
            .map(|(i, &(name, dso))| Location {
                ip: if name.contains("@ 0x0 ") {
                    0
                } else {
                    0x1000 + i as u64
                },
                symbol: Symbol::FromPerf(strings.intern(name)),
                offset: 0,
                dso: dso.map(|d| strings.intern(d)),
            })
            .collect()
    }

    fn names(e: &Event, strings: &StringTable) -> Vec<String> {
        let Event::Ok {
            data: EventData::StackSample { callstack },
            ..
        } = e
        else {
            unreachable!()
        };
        strings
            .stack(*callstack)
            .map(|l| strings.display(l.symbol).to_owned())
            .collect()
    }

    #[test]
    fn cuts_at_the_innermost_unmapped_caller_only() {
        let mut s = StringTable::new();
        let mut n = Namer::new(false, true);
        let lib = Some("/usr/lib/libc.so.6");
        let none = Some("[unknown]");
        // Root first: garbage, a plausible frame read through it, more garbage, then
        // real frames down to the leaf.
        let mut e = sample(
            &mut s,
            &[
                ("[unknown @ 0x77 ([unknown])]", none),
                ("main", lib),
                ("[unknown @ 0x4341505f45434152 ([unknown])]", none),
                ("caller", lib),
                ("leaf", lib),
            ],
        );
        n.apply(&mut e, &mut s);
        assert_eq!(names(&e, &s), [STACK_CUT, "caller", "leaf"]);
        // The leaf is the sampled pc, never read from a frame: not a broken chain.
        let mut e = sample(
            &mut s,
            &[("main", lib), ("[unknown @ 0x10 ([unknown])]", none)],
        );
        n.apply(&mut e, &mut s);
        assert_eq!(names(&e, &s), ["main", "[unknown @ 0x10 ([unknown])]"]);
        // Without a DSO field nothing is known about mappings.
        let mut e = sample(&mut s, &[("[unknown]", None), ("leaf", lib)]);
        n.apply(&mut e, &mut s);
        assert_eq!(names(&e, &s), ["[unknown]", "leaf"]);
        assert_eq!(n.stats().cut, 1);
        assert_eq!(n.stats().stacks, 3);
        assert_eq!(n.cut_notice(), None);
        // A walk that reached the root ends with a 0 (or -1): dropped, nothing cut.
        let mut e = sample(
            &mut s,
            &[
                ("[unknown @ 0x0 ([unknown])]", none),
                ("main", lib),
                ("leaf", lib),
            ],
        );
        n.apply(&mut e, &mut s);
        assert_eq!(names(&e, &s), ["main", "leaf"]);
        assert_eq!(n.stats().cut, 1);
        for _ in 0..3 {
            let mut e = sample(
                &mut s,
                &[("[unknown @ 0x9 ([unknown])]", none), ("leaf", lib)],
            );
            n.apply(&mut e, &mut s);
        }
        assert!(
            n.cut_notice().is_some_and(|m| m.contains("4 of 7")),
            "{:?}",
            n.cut_notice()
        );
    }

    #[test]
    fn kernel_frames_fold_into_one_named_after_the_system_call() {
        let mut s = StringTable::new();
        let mut n = Namer::new(false, true);
        n.set_fold_kernel(true);
        let kernel_sample = |s: &mut StringTable, frames: &[&str]| {
            let mut callstack =
                locations(s, &[("main", Some("/x")), ("__libc_read", Some("/libc"))]);
            for (i, f) in frames.iter().enumerate() {
                callstack.push(Location {
                    ip: 0xffff_ffff_8100_0000 + i as u64,
                    symbol: Symbol::FromPerf(s.intern(f)),
                    offset: 0,
                    dso: Some(s.intern("[kernel.kallsyms]")),
                });
            }
            stack_sample(s, callstack)
        };
        // Root first: the syscall entry, then the system call, a fault taken inside it.
        let mut e = kernel_sample(
            &mut s,
            &[
                "entry_SYSCALL_64_after_hwframe",
                "do_syscall_64",
                "__x64_sys_read",
                "ksys_read",
                "asm_exc_page_fault",
                "_copy_to_iter",
            ],
        );
        n.apply(&mut e, &mut s);
        assert_eq!(names(&e, &s), ["main", "__libc_read", "[kernel: read]"]);
        let mut e = kernel_sample(&mut s, &["asm_exc_page_fault", "handle_mm_fault"]);
        n.apply(&mut e, &mut s);
        assert_eq!(
            names(&e, &s),
            ["main", "__libc_read", "[kernel: page fault]"]
        );
        let mut e = kernel_sample(&mut s, &["[unknown]", "[unknown]"]);
        n.apply(&mut e, &mut s);
        assert_eq!(names(&e, &s), ["main", "__libc_read", IN_KERNEL]);
        // Entered by a system call whose handler is not named for it.
        let mut e = kernel_sample(&mut s, &["do_syscall_64", "x64_sys_call", "vfs_read"]);
        n.apply(&mut e, &mut s);
        assert_eq!(names(&e, &s), ["main", "__libc_read", IN_SYSCALL]);
        // A user-mode sample is untouched.
        let mut e = kernel_sample(&mut s, &[]);
        n.apply(&mut e, &mut s);
        assert_eq!(names(&e, &s), ["main", "__libc_read"]);
        assert_eq!(n.stats().kernel_folded, 4);
        // The user-space leaf under the `[kernel: …]` frame is the sampled user pc, never
        // read from a frame: an unmapped one is no broken chain.
        let mut callstack = locations(
            &mut s,
            &[
                ("main", Some("/x")),
                ("[unknown @ 0x10 ([unknown])]", Some("[unknown]")),
            ],
        );
        callstack.push(Location {
            ip: 0xffff_ffff_8100_0000,
            symbol: Symbol::FromPerf(s.intern("__x64_sys_read")),
            offset: 0,
            dso: Some(s.intern("[kernel.kallsyms]")),
        });
        let mut e = stack_sample(&mut s, callstack);
        n.apply(&mut e, &mut s);
        assert_eq!(
            names(&e, &s),
            ["main", "[unknown @ 0x10 ([unknown])]", "[kernel: read]"]
        );
        assert_eq!(n.stats().cut, 0);
        // Without the fold (a trace with the kernel) nothing changes.
        let mut n = Namer::new(false, true);
        let mut e = kernel_sample(&mut s, &["__x64_sys_read"]);
        n.apply(&mut e, &mut s);
        assert_eq!(names(&e, &s), ["main", "__libc_read", "__x64_sys_read"]);
    }

    #[test]
    fn kernel_frame_names() {
        assert_eq!(
            kernel_frame_name("__x64_sys_futex").as_deref(),
            Some("[kernel: futex]")
        );
        assert_eq!(kernel_frame_name("__x64_sys_").as_deref(), None);
        assert_eq!(
            kernel_frame_name("asm_sysvec_apic_timer_interrupt").as_deref(),
            Some("[kernel: interrupt]")
        );
        assert_eq!(
            kernel_frame_name("ksys_read+0x66").as_deref(),
            Some("[kernel: read]")
        );
        assert_eq!(kernel_frame_name("vfs_read"), None);
    }
}
