//! The segments writer on hand-made event streams: kernel entries, TSX, filter ranges,
//! OCaml traps and time order of the output.

use ptscope_event::{
    Event, EventData, Kind, Location, OcamlExceptionInfo, StringTable, Symbol, Thread, TraceScope,
    TraceStateChange,
};
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::{Arg, StackWriter, TraceSink, WriterConfig};

/// (start, end, depth, name) of every slice, from a sink that checks nesting and order.
#[derive(Default)]
struct Slices {
    open: Vec<(i64, String)>,
    done: Vec<(i64, i64, usize, String)>,
    last: i64,
    instants: Vec<(i64, String)>,
}

impl TraceSink for Slices {
    type Thread = u32;
    fn allocate_pid(&mut self, _: &str) -> u32 {
        0
    }
    fn allocate_thread(&mut self, _: u32, _: &str) -> u32 {
        0
    }
    fn duration_begin(&mut self, _: u32, name: &str, t: i64, _: &[Arg<'_>]) {
        assert!(t >= self.last, "time went backwards at {name}");
        self.last = t;
        self.open.push((t, name.to_string()));
    }
    fn duration_end(&mut self, _: u32, name: &str, t: i64, _: &[Arg<'_>]) {
        assert!(t >= self.last, "time went backwards at end of {name}");
        self.last = t;
        let (s, n) = self.open.pop().expect("end without begin");
        assert_eq!(n, name, "ends must close the innermost slice");
        self.done.push((s, t, self.open.len(), n));
    }
    fn duration_complete(&mut self, _: u32, _: &str, _: i64, _: i64, _: &[Arg<'_>]) {}
    fn duration_instant(&mut self, _: u32, name: &str, t: i64, _: &[Arg<'_>]) {
        self.instants.push((t, name.to_string()));
    }
    fn counter(&mut self, _: u32, _: &str, _: i64, _: &[Arg<'_>]) {}
    fn warning(&mut self, _: &str) {}
}

struct Build {
    s: StringTable,
    events: Vec<Event>,
}

impl Build {
    fn new() -> Self {
        Build {
            s: StringTable::new(),
            events: Vec::new(),
        }
    }
    fn loc(&mut self, ip: u64, name: &str) -> Location {
        let sym = if name.is_empty() {
            Symbol::Unknown
        } else {
            Symbol::FromPerf(self.s.intern(name))
        };
        Location::new(ip, sym, 1)
    }
    fn br(
        &mut self,
        t: u64,
        kind: Option<Kind>,
        change: Option<TraceStateChange>,
        src: (u64, &str),
        dst: (u64, &str),
        tx: bool,
    ) {
        let src = self.loc(src.0, src.1);
        let dst = self.loc(dst.0, dst.1);
        let (src, dst) = (self.s.intern_location(src), self.s.intern_location(dst));
        self.events.push(Event::Ok {
            thread: Thread {
                pid: Some(1),
                tid: Some(1),
            },
            time: t,
            in_transaction: tx,
            data: EventData::Trace {
                change,
                kind,
                src,
                dst,
            },
        });
    }
    /// A branch whose destination is `dst` at byte `offset` of its symbol (`k` puts
    /// every location at offset 1).
    fn k_to(&mut self, t: u64, kind: Kind, src: (u64, &str), dst: (u64, &str, u64)) {
        let src = self.loc(src.0, src.1);
        let mut to = self.loc(dst.0, dst.1);
        to.offset = dst.2;
        let (src, to) = (self.s.intern_location(src), self.s.intern_location(to));
        self.events.push(Event::Ok {
            thread: Thread {
                pid: Some(1),
                tid: Some(1),
            },
            time: t,
            in_transaction: false,
            data: EventData::Trace {
                change: None,
                kind: Some(kind),
                src,
                dst: to,
            },
        });
    }
    /// The last event, a branch, has its ends in `src` and `dst`.
    fn set_dsos(&mut self, src: ptscope_event::Sym, dst: ptscope_event::Sym) {
        if let Some(Event::Ok {
            data: EventData::Trace { src: s, dst: d, .. },
            ..
        }) = self.events.last_mut()
        {
            for (h, dso) in [(s, src), (d, dst)] {
                let loc = Location {
                    dso: Some(dso),
                    ..*self.s.location(*h)
                };
                *h = self.s.intern_location(loc);
            }
        }
    }
    /// A decode error at `t`, then tracing resumes at `resume` (perf's `tr strt`).
    fn lost(&mut self, t: u64, resume: (u64, &str)) {
        let message = self.s.intern("Overflow packet");
        self.events.push(Event::DecodeError {
            thread: Thread {
                pid: Some(1),
                tid: Some(1),
            },
            time: Some(t),
            ip: None,
            message,
        });
        self.br(
            t,
            None,
            Some(TraceStateChange::Start),
            (0, ""),
            resume,
            false,
        );
    }
    fn k(&mut self, t: u64, kind: Kind, src: (u64, &str), dst: (u64, &str)) {
        self.br(t, Some(kind), None, src, dst, false);
    }
    fn run(self, config: WriterConfig, filter: Option<&dyn Fn(usize) -> bool>) -> Slices {
        let mut w = SegmentsWriter::new(Slices::default(), config);
        for (i, e) in self.events.iter().enumerate() {
            match filter {
                Some(f) => w.write_event_filtered(e, f(i), &self.s),
                None => w.write_event(e, &self.s),
            }
        }
        let mut out = w.finish(&self.s);
        out.done.sort();
        out
    }
}

fn has(s: &Slices, slice: (i64, i64, usize, &str)) -> bool {
    s.done
        .iter()
        .any(|d| (d.0, d.1, d.2, d.3.as_str()) == slice)
}

/// Asserts that every one of `slices` (begin, end, depth, name) was shown.
fn assert_has_all(s: &Slices, slices: &[(i64, i64, usize, &str)]) {
    for &slice in slices {
        assert!(has(s, slice), "no {slice:?} in {:?}", s.done);
    }
}

const K: u64 = 0xffff_ffff_8100_0000;

/// With kernel tracing, a syscall runs on a stack of its own on top of the user stack;
/// a kernel return above the first kernel frame seen finds that frame's caller.
#[test]
fn kernel_entries_nest_over_the_user_stack() {
    let mut b = Build::new();
    b.k(0, Kind::Call, (0x100, "main"), (0x200, "foo"));
    b.k(10, Kind::Syscall, (0x210, "foo"), (K, "entry_SYSCALL_64"));
    b.k(
        20,
        Kind::Call,
        (K + 0x10, "entry_SYSCALL_64"),
        (K + 0x100, "do_syscall_64"),
    );
    b.k(
        30,
        Kind::Return,
        (K + 0x110, "do_syscall_64"),
        (K + 0x20, "entry_SYSCALL_64"),
    );
    b.k(
        40,
        Kind::Sysret,
        (K + 0x30, "entry_SYSCALL_64"),
        (0x212, "foo"),
    );
    b.k(50, Kind::Return, (0x220, "foo"), (0x105, "main"));
    // An interrupt whose first kernel frame returns into a caller never seen.
    b.k(
        60,
        Kind::HardwareInterrupt,
        (0x106, "main"),
        (K + 0x500, "irq_handler"),
    );
    b.k(
        70,
        Kind::Return,
        (K + 0x510, "irq_handler"),
        (K + 0x600, "common_interrupt"),
    );
    b.k(
        80,
        Kind::Iret,
        (K + 0x610, "common_interrupt"),
        (0x106, "main"),
    );
    let s = b.run(
        WriterConfig {
            scope: TraceScope::UserspaceAndKernel,
            ..Default::default()
        },
        None,
    );
    // main runs to the end of the trace (the iret back into it at 80).
    assert!(has(&s, (0, 80, 0, "main")), "{:?}", s.done);
    assert!(has(&s, (0, 50, 1, "foo")), "{:?}", s.done);
    assert!(has(&s, (10, 40, 2, "entry_SYSCALL_64")), "{:?}", s.done);
    assert!(has(&s, (20, 30, 3, "do_syscall_64")), "{:?}", s.done);
    assert!(has(&s, (60, 70, 2, "irq_handler")), "{:?}", s.done);
    // The caller found by the return was running since the interrupt began.
    assert!(has(&s, (60, 80, 1, "common_interrupt")), "{:?}", s.done);
    assert_eq!(s.done.len(), 6, "no other frames: {:?}", s.done);
}

/// Branches inside a TSX transaction count only if it commits; an abort drops them.
#[test]
fn aborted_transactions_leave_no_frames() {
    let mut b = Build::new();
    b.k(0, Kind::Call, (0x100, "main"), (0x200, "work"));
    b.br(
        10,
        Some(Kind::Call),
        None,
        (0x210, "work"),
        (0x300, "in_tx_aborted"),
        true,
    );
    b.br(
        20,
        Some(Kind::TxAbort),
        None,
        (0x310, "in_tx_aborted"),
        (0x220, "work"),
        false,
    );
    b.br(
        30,
        Some(Kind::Call),
        None,
        (0x230, "work"),
        (0x400, "in_tx_committed"),
        true,
    );
    b.br(
        40,
        Some(Kind::Return),
        None,
        (0x410, "in_tx_committed"),
        (0x240, "work"),
        true,
    );
    b.k(50, Kind::Return, (0x250, "work"), (0x105, "main"));
    let s = b.run(WriterConfig::default(), None);
    assert!(
        !s.done.iter().any(|d| d.3 == "in_tx_aborted"),
        "{:?}",
        s.done
    );
    assert!(has(&s, (30, 40, 2, "in_tx_committed")), "{:?}", s.done);
}

/// Outside a filter range nothing is written; entering one reopens the live stack.
#[test]
fn filter_ranges_close_and_reopen_the_stack() {
    let mut b = Build::new();
    b.k(0, Kind::Call, (0x100, "main"), (0x200, "a"));
    b.k(10, Kind::Call, (0x210, "a"), (0x300, "b"));
    b.k(20, Kind::Return, (0x310, "b"), (0x220, "a"));
    b.k(30, Kind::Call, (0x230, "a"), (0x400, "c"));
    b.k(40, Kind::Return, (0x410, "c"), (0x240, "a"));
    b.k(50, Kind::Return, (0x250, "a"), (0x105, "main"));
    // Events 1..=2 (b's call and return) are outside the range.
    let s = b.run(WriterConfig::default(), Some(&|i| !(1..=2).contains(&i)));
    assert!(!s.done.iter().any(|d| d.3 == "b"), "{:?}", s.done);
    assert!(has(&s, (30, 40, 2, "c")), "{:?}", s.done);
    // a and main were closed when the range was left and reopened when it resumed.
    assert!(
        has(&s, (0, 10, 1, "a")) && has(&s, (30, 50, 1, "a")),
        "{:?}",
        s.done
    );
}

/// An entertrap with no matching pushtrap starts a new segment instead of guessing.
#[test]
fn unmatched_entertrap_splits_the_segment() {
    let mut b = Build::new();
    b.k(0, Kind::Call, (0x100, "caml_main"), (0x200, "f"));
    b.k(10, Kind::Call, (0x210, "f"), (0x300, "g"));
    // A raise lands on a handler whose trap was pushed before the trace started.
    b.br(
        20,
        Some(Kind::Jump),
        None,
        (0x310, "g"),
        (0x150, "caml_main"),
        false,
    );
    b.k(30, Kind::Call, (0x160, "caml_main"), (0x500, "h"));
    let traps = OcamlExceptionInfo::new(&[], &[], &[0x150]);
    let s = b.run(
        WriterConfig {
            ocaml_exception_info: Some(traps),
            ..Default::default()
        },
        None,
    );
    // f and g end at the split; caml_main starts afresh and h runs inside it.
    assert!(
        s.done.iter().any(|d| d.3 == "g" && d.1 <= 20),
        "{:?}",
        s.done
    );
    assert!(
        s.done.iter().any(|d| d.3 == "h" && d.0 == 30),
        "{:?}",
        s.done
    );
    assert!(
        !s.done.iter().any(|d| d.3 == "f" && d.1 > 20),
        "{:?}",
        s.done
    );
}

/// Parks the running goroutine: `gopark` calls down to `gogo` from `at` (nanoseconds).
fn park(b: &mut Build, at: u64, from: (u64, &str)) {
    b.k(at, Kind::Call, from, (0x500, "runtime.gopark"));
    let path = [
        (0x600, "runtime.mcall"),
        (0x640, "runtime.park_m"),
        (0x680, "runtime.schedule"),
        (0x6c0, "runtime.execute"),
        (0x6f0, "gogo"),
    ];
    let mut src = (0x508, "runtime.gopark");
    for (i, &dst) in path.iter().enumerate() {
        b.k(at + 5 * (i as u64 + 1), Kind::Call, src, dst);
        src = (dst.0 + 8, dst.1);
    }
}

/// A goroutine whose callers contradict the parked stack is another goroutine: it is
/// not shown on the parked one's frames (only the shared outermost frame stays). When
/// the parked goroutine resumes and its callers single out its remembered stack, its
/// outer frames come back under it.
#[test]
fn goroutines_keep_their_own_stacks() {
    let mut b = Build::new();
    b.k(
        0,
        Kind::Call,
        (0x50, "runtime.goexit"),
        (0x100, "runtime.main"),
    );
    b.k(2, Kind::Call, (0x110, "runtime.main"), (0x200, "main.loop"));
    b.k(4, Kind::Call, (0x210, "main.loop"), (0x300, "main.a"));
    b.k(6, Kind::Call, (0x310, "main.a"), (0x400, "main.b"));
    park(&mut b, 10, (0x410, "main.b"));
    // Another goroutine resumes: its callers are not main.b's.
    b.k(50, Kind::Return, (0x6f8, "gogo"), (0x50d, "runtime.gopark"));
    b.k(
        60,
        Kind::Return,
        (0x520, "runtime.gopark"),
        (0x705, "worker.recv"),
    );
    b.k(
        70,
        Kind::Return,
        (0x720, "worker.recv"),
        (0x805, "worker.loop"),
    );
    park(&mut b, 80, (0x810, "worker.loop"));
    // main resumes and returns through main.b, main.a into main.loop.
    b.k(
        120,
        Kind::Return,
        (0x6f8, "gogo"),
        (0x50d, "runtime.gopark"),
    );
    b.k(
        130,
        Kind::Return,
        (0x520, "runtime.gopark"),
        (0x415, "main.b"),
    );
    b.k(140, Kind::Return, (0x420, "main.b"), (0x315, "main.a"));
    b.k(150, Kind::Return, (0x320, "main.a"), (0x215, "main.loop"));
    b.k(160, Kind::Call, (0x220, "main.loop"), (0x900, "main.c"));
    b.k(170, Kind::Return, (0x910, "main.c"), (0x225, "main.loop"));
    let s = b.run(WriterConfig::default(), None);
    let during = |name: &str, t: i64| {
        s.done
            .iter()
            .filter(|d| d.3 == name && d.0 <= t && t < d.1)
            .map(|d| d.2)
            .collect::<Vec<_>>()
    };
    // The worker runs on the shared root only.
    assert_eq!(during("runtime.goexit", 65), vec![0], "{:?}", s.done);
    assert_eq!(during("worker.loop", 75), vec![1], "{:?}", s.done);
    assert_eq!(during("worker.recv", 65), vec![2], "{:?}", s.done);
    for gone in ["runtime.main", "main.loop", "main.a", "main.b"] {
        assert!(
            during(gone, 65).is_empty(),
            "{gone} shown under the worker: {:?}",
            s.done
        );
    }
    // main is itself again once its callers are known, root included.
    assert_eq!(during("runtime.goexit", 165), vec![0], "{:?}", s.done);
    assert_eq!(during("runtime.main", 165), vec![1], "{:?}", s.done);
    assert_eq!(during("main.loop", 165), vec![2], "{:?}", s.done);
    assert_eq!(during("main.c", 165), vec![3], "{:?}", s.done);
    // ... and its callers learnt after the switch cover the whole time it ran.
    assert_eq!(during("main.a", 125), vec![3], "{:?}", s.done);
}

/// ld.so's `_start` ends with `call _dl_start`, which returns onto the label after it,
/// `_dl_start_user` at offset 0 (a return address follows its call, so the call ended the
/// code before the label). After a loss, the new segment learns its root from that return:
/// it is the open `_start` (its frames line up with the open ones above), which continues
/// through the gap and runs the label's code from the return on, as without the gap.
#[test]
fn a_root_learnt_from_a_label_stitches_to_its_caller() {
    let mut b = Build::new();
    b.k(0, Kind::Call, (0x103, "_start"), (0x200, "_dl_start"));
    b.k(10, Kind::Call, (0x210, "_dl_start"), (0x300, "dl_main"));
    b.k(20, Kind::Call, (0x310, "dl_main"), (0x400, "relocate"));
    b.lost(30, (0x410, "relocate"));
    b.k(40, Kind::Return, (0x420, "relocate"), (0x320, "dl_main"));
    b.k(50, Kind::Return, (0x330, "dl_main"), (0x220, "_dl_start"));
    b.k_to(
        60,
        Kind::Return,
        (0x230, "_dl_start"),
        (0x108, "_dl_start_user", 0),
    );
    b.k(
        70,
        Kind::Call,
        (0x12b, "_dl_start_user"),
        (0x500, "_dl_init"),
    );
    b.k(
        80,
        Kind::Return,
        (0x510, "_dl_init"),
        (0x130, "_dl_start_user"),
    );
    let s = b.run(WriterConfig::default(), None);
    let roots: Vec<_> = s
        .done
        .iter()
        .filter(|d| d.2 == 0)
        .map(|d| (d.0, d.1, d.3.as_str()))
        .collect();
    assert_eq!(
        roots,
        [(0, 60, "_start"), (60, 80, "_dl_start_user")],
        "{:?}",
        s.done
    );
    // The frames matched above the label go on through the gap too.
    assert!(has(&s, (0, 60, 1, "_dl_start")), "{:?}", s.done);
    assert!(has(&s, (10, 50, 2, "dl_main")), "{:?}", s.done);
    assert!(has(&s, (70, 80, 1, "_dl_init")), "{:?}", s.done);
}

/// libgcc unwinding after a decode error: the segment after the gap knows only the
/// unwinder, which then jumps into the middle of `guarded` (its landing pad). The
/// frames between were open before the gap: they end at the jump, and `guarded` goes
/// on, instead of the unwinder being shown as called by `main` for the whole segment.
#[test]
fn an_unwind_after_a_gap_lands_in_the_frame_open_before_it() {
    let mut b = Build::new();
    b.k(0, Kind::Call, (0x103, "_start"), (0x200, "main"));
    b.k(10, Kind::Call, (0x210, "main"), (0x300, "guarded"));
    b.k(20, Kind::Call, (0x310, "guarded"), (0x400, "deep"));
    b.k(25, Kind::Call, (0x410, "deep"), (0x400, "deep"));
    b.k(30, Kind::Call, (0x420, "deep"), (0x500, "__cxa_throw"));
    b.k(
        40,
        Kind::Call,
        (0x510, "__cxa_throw"),
        (0x600, "_Unwind_RaiseException"),
    );
    b.k(
        45,
        Kind::Call,
        (0x610, "_Unwind_RaiseException"),
        (0x700, "personality"),
    );
    b.lost(50, (0x710, "personality"));
    b.k(
        60,
        Kind::Return,
        (0x720, "personality"),
        (0x615, "_Unwind_RaiseException"),
    );
    b.k_to(
        70,
        Kind::Jump,
        (0x620, "_Unwind_RaiseException"),
        (0x330, "guarded", 0x30),
    );
    b.k(80, Kind::Return, (0x340, "guarded"), (0x220, "main"));
    b.k(90, Kind::Return, (0x230, "main"), (0x120, "_start"));
    let s = b.run(WriterConfig::default(), None);
    assert!(has(&s, (10, 80, 2, "guarded")), "{:?}", s.done);
    assert!(has(&s, (0, 90, 1, "main")), "{:?}", s.done);
    for (name, depth) in [
        ("deep", 3),
        ("deep", 4),
        ("__cxa_throw", 5),
        ("_Unwind_RaiseException", 6),
    ] {
        assert!(
            s.done
                .iter()
                .any(|d| d.1 == 70 && d.2 == depth && d.3 == name),
            "{name} at depth {depth} should end at the unwind: {:?}",
            s.done
        );
    }
    // The unwinder is never shown as called by `main`.
    assert!(
        !s.done
            .iter()
            .any(|d| d.2 == 2 && d.3 == "_Unwind_RaiseException"),
        "{:?}",
        s.done
    );
}

/// `tr end syscall` at `at`: tracing stops until the next `tr strt`.
fn syscall_stop(b: &mut Build, t: u64, at: (u64, &str)) {
    b.br(
        t,
        Some(Kind::Syscall),
        Some(TraceStateChange::End),
        at,
        (0, ""),
        false,
    );
}

/// `tr strt` at `at`.
fn trace_start(b: &mut Build, t: u64, at: (u64, &str)) {
    b.br(t, None, Some(TraceStateChange::Start), (0, ""), at, false);
}

/// A signal delivered as `raise`'s syscall returns: tracing starts at the handler, not
/// after the syscall. The handler runs on top of `raise`, returns into the trampoline,
/// whose `rt_sigreturn` resumes `raise` right after its syscall. A second signal is
/// delivered as that `rt_sigreturn` returns: its handler takes the first one's place.
#[test]
fn a_signal_at_a_syscall_return_runs_on_the_interrupted_frame() {
    let mut b = Build::new();
    b.k(0, Kind::Call, (0x103, "_start"), (0x200, "main"));
    b.k(10, Kind::Call, (0x210, "main"), (0x300, "raise"));
    syscall_stop(&mut b, 20, (0x320, "raise"));
    trace_start(&mut b, 30, (0x400, "on_usr1"));
    b.k(40, Kind::Call, (0x410, "on_usr1"), (0x500, "note"));
    b.k(45, Kind::Return, (0x510, "note"), (0x415, "on_usr1"));
    b.k_to(
        50,
        Kind::Return,
        (0x420, "on_usr1"),
        (0x600, "__restore_rt", 0),
    );
    syscall_stop(&mut b, 55, (0x607, "__restore_rt"));
    // A pending signal, delivered as rt_sigreturn returns.
    trace_start(&mut b, 60, (0x400, "on_usr1"));
    b.k_to(
        70,
        Kind::Return,
        (0x420, "on_usr1"),
        (0x600, "__restore_rt", 0),
    );
    syscall_stop(&mut b, 75, (0x607, "__restore_rt"));
    // rt_sigreturn: `raise` resumes after its syscall (0x320 + 2).
    trace_start(&mut b, 80, (0x322, "raise"));
    b.k(90, Kind::Return, (0x330, "raise"), (0x215, "main"));
    // An ordinary syscall resumes where it stopped.
    b.k(100, Kind::Call, (0x220, "main"), (0x300, "raise"));
    syscall_stop(&mut b, 110, (0x320, "raise"));
    trace_start(&mut b, 120, (0x322, "raise"));
    b.k(130, Kind::Return, (0x330, "raise"), (0x225, "main"));
    b.k(140, Kind::Return, (0x230, "main"), (0x108, "_start"));
    let s = b.run(WriterConfig::default(), None);
    assert_has_all(
        &s,
        &[
            (0, 140, 1, "main"),
            (10, 90, 2, "raise"),
            (30, 50, 3, "on_usr1"),
            (40, 45, 4, "note"),
            (50, 60, 3, "__restore_rt"),
            (60, 70, 3, "on_usr1"),
            (70, 80, 3, "__restore_rt"),
            (100, 130, 2, "raise"),
        ],
    );
    // `main` is shown once, under `_start`: no level is added by the trampoline.
    let mains = s.done.iter().filter(|d| d.3 == "main").count();
    assert_eq!(mains, 1, "{:?}", s.done);
}

/// A cleanup landing pad ends in `_Unwind_Resume`, which resumes unwinding *above* its
/// caller: in a recursion, each jump to `nest`'s pad lands one `nest` frame further out,
/// not in the `nest` that called `_Unwind_Resume`.
#[test]
fn unwind_resume_lands_above_its_caller_in_a_recursion() {
    let mut b = Build::new();
    b.k(0, Kind::Call, (0x103, "_start"), (0x200, "main"));
    b.k(10, Kind::Call, (0x210, "main"), (0x300, "attempt"));
    b.k(20, Kind::Call, (0x310, "attempt"), (0x400, "nest"));
    b.k(22, Kind::Call, (0x410, "nest"), (0x400, "nest"));
    b.k(24, Kind::Call, (0x410, "nest"), (0x400, "nest"));
    b.k(30, Kind::Call, (0x410, "nest"), (0x500, "parse"));
    b.k(35, Kind::Call, (0x510, "parse"), (0x600, "__cxa_throw"));
    b.k(
        40,
        Kind::Call,
        (0x610, "__cxa_throw"),
        (0x700, "_Unwind_RaiseException"),
    );
    // The thrower's own cleanup first, then each `nest`'s.
    b.k_to(
        45,
        Kind::Jump,
        (0x720, "_Unwind_RaiseException"),
        (0x530, "parse", 0x30),
    );
    for (t, from, pad) in [(50, 0x540, (0x440, "nest", 0x40)); 1].into_iter().chain([
        (60, 0x450, (0x440, "nest", 0x40)),
        (70, 0x450, (0x440, "nest", 0x40)),
        (80, 0x450, (0x340, "attempt", 0x40)),
    ]) {
        let caller = if from == 0x540 { "parse" } else { "nest" };
        b.k(t, Kind::Call, (from, caller), (0x800, "_Unwind_Resume"));
        b.k_to(t + 5, Kind::Jump, (0x820, "_Unwind_Resume"), pad);
    }
    b.k(90, Kind::Return, (0x350, "attempt"), (0x215, "main"));
    b.k(95, Kind::Return, (0x230, "main"), (0x108, "_start"));
    let s = b.run(WriterConfig::default(), None);
    assert_has_all(
        &s,
        &[
            (30, 55, 6, "parse"),
            (24, 65, 5, "nest"),
            (22, 75, 4, "nest"),
            (20, 85, 3, "nest"),
            (10, 90, 2, "attempt"),
        ],
    );
    // No `nest` left over above `attempt` after the catch.
    assert!(
        !s.done.iter().any(|d| d.3 == "nest" && d.1 > 85),
        "{:?}",
        s.done
    );
}

/// A snapshot that starts inside `_Unwind_Resume`: every landing pad is in a frame the
/// trace never saw called. The catching frame is not put on top of the frame that
/// entered the unwinder (its callee), nor is a pad taken as a tail jump from it.
#[test]
fn a_snapshot_starting_mid_unwind_never_puts_a_caller_on_its_callee() {
    let mut b = Build::new();
    b.k(
        0,
        Kind::Return,
        (0x750, "_Unwind_Find_FDE"),
        (0x815, "_Unwind_Resume"),
    );
    b.k_to(
        5,
        Kind::Jump,
        (0x820, "_Unwind_Resume"),
        (0x440, "nest", 0x40),
    );
    b.k(10, Kind::Call, (0x450, "nest"), (0x800, "_Unwind_Resume"));
    b.k_to(
        15,
        Kind::Jump,
        (0x820, "_Unwind_Resume"),
        (0x440, "nest", 0x40),
    );
    b.k(20, Kind::Call, (0x450, "nest"), (0x800, "_Unwind_Resume"));
    b.k_to(
        25,
        Kind::Jump,
        (0x820, "_Unwind_Resume"),
        (0x340, "attempt", 0x40),
    );
    b.k(30, Kind::Return, (0x350, "attempt"), (0x215, "main"));
    b.k(35, Kind::Return, (0x230, "main"), (0x108, "_start"));
    let s = b.run(WriterConfig::default(), None);
    // After the catch: _start > main > attempt, nothing else.
    assert!(has(&s, (25, 30, 2, "attempt")), "{:?}", s.done);
    assert!(has(&s, (25, 35, 1, "main")), "{:?}", s.done);
    // Each pad's frame is an outermost known frame until it enters the unwinder again.
    assert!(has(&s, (5, 15, 0, "nest")), "{:?}", s.done);
    assert!(has(&s, (15, 25, 0, "nest")), "{:?}", s.done);
    assert_eq!(
        s.done
            .iter()
            .filter(|d| d.3 == "attempt" || d.3 == "nest")
            .count(),
        3,
        "{:?}",
        s.done
    );
}

/// A snapshot that starts inside a signal handler: its delivery is not in the trace.
/// The handler's return onto the trampoline's first byte names no caller; the trampoline's
/// `rt_sigreturn` shows which frame the signal interrupted, and that frame (not the
/// trampoline) is the handler's caller from the start.
#[test]
fn a_snapshot_starting_in_a_handler_finds_the_interrupted_frame() {
    let mut b = Build::new();
    b.k(0, Kind::Call, (0x410, "on_usr1"), (0x500, "note"));
    b.k(5, Kind::Return, (0x510, "note"), (0x415, "on_usr1"));
    b.k_to(
        10,
        Kind::Return,
        (0x420, "on_usr1"),
        (0x600, "__restore_rt", 0),
    );
    syscall_stop(&mut b, 15, (0x607, "__restore_rt"));
    trace_start(&mut b, 20, (0x322, "raise"));
    b.k(30, Kind::Return, (0x330, "raise"), (0x215, "main"));
    b.k(40, Kind::Return, (0x230, "main"), (0x108, "_start"));
    let s = b.run(WriterConfig::default(), None);
    assert_has_all(
        &s,
        &[
            (0, 40, 1, "main"),
            (0, 30, 2, "raise"),
            (0, 10, 3, "on_usr1"),
            (0, 5, 4, "note"),
            (10, 20, 3, "__restore_rt"),
        ],
    );
    assert_eq!(
        s.done.iter().filter(|d| d.3 == "raise").count(),
        1,
        "{:?}",
        s.done
    );
}

/// An asynchronous stop (an interrupt) resumes at the instruction it interrupted; when
/// tracing starts at a handler instead, a signal was delivered there, and the handler's
/// `rt_sigreturn` resumes that instruction.
#[test]
fn a_signal_interrupting_a_loop_runs_on_the_interrupted_frame() {
    let mut b = Build::new();
    b.k(0, Kind::Call, (0x103, "_start"), (0x200, "main"));
    b.k(10, Kind::Call, (0x210, "main"), (0x300, "spin"));
    // An interrupt with nothing delivered: tracing resumes where it stopped.
    b.br(
        20,
        Some(Kind::Async),
        Some(TraceStateChange::End),
        (0x320, "spin"),
        (0, ""),
        false,
    );
    trace_start(&mut b, 25, (0x320, "spin"));
    // A timer signal delivered at the next interrupt.
    b.br(
        30,
        Some(Kind::Async),
        Some(TraceStateChange::End),
        (0x330, "spin"),
        (0, ""),
        false,
    );
    trace_start(&mut b, 40, (0x400, "on_alarm"));
    b.k_to(
        50,
        Kind::Return,
        (0x420, "on_alarm"),
        (0x600, "__restore_rt", 0),
    );
    syscall_stop(&mut b, 55, (0x607, "__restore_rt"));
    trace_start(&mut b, 60, (0x330, "spin"));
    b.k(70, Kind::Return, (0x340, "spin"), (0x215, "main"));
    b.k(80, Kind::Return, (0x230, "main"), (0x108, "_start"));
    let s = b.run(WriterConfig::default(), None);
    assert_has_all(
        &s,
        &[
            (0, 80, 1, "main"),
            (10, 70, 2, "spin"),
            (40, 50, 3, "on_alarm"),
            (50, 60, 3, "__restore_rt"),
        ],
    );
    assert_eq!(
        s.done.iter().filter(|d| d.3 == "main").count(),
        1,
        "{:?}",
        s.done
    );
}

/// `execve` replaces the program: its syscall never returns, and tracing starts again at
/// the new program's entry. That `tr strt` is neither a resume nor a signal delivery:
/// the old program's frames end at the exec, and the new program's start as roots.
#[test]
fn an_exec_ends_the_old_program_and_starts_the_new_one_as_root() {
    let mut b = Build::new();
    b.k(0, Kind::Call, (0x103, "_start"), (0x200, "main"));
    b.k(10, Kind::Call, (0x210, "main"), (0x300, "execve"));
    syscall_stop(&mut b, 20, (0x320, "execve"));
    let name = b.s.intern("echo");
    b.events.push(Event::Ok {
        thread: Thread {
            pid: Some(1),
            tid: Some(1),
        },
        time: 25,
        in_transaction: false,
        data: EventData::Comm { name, exec: true },
    });
    // The dynamic loader's entry, then its first call.
    trace_start(&mut b, 30, (0x7000, "_dl_entry"));
    b.k(40, Kind::Call, (0x7010, "_dl_entry"), (0x7100, "_dl_start"));
    b.k(
        50,
        Kind::Return,
        (0x7110, "_dl_start"),
        (0x7015, "_dl_entry"),
    );
    b.k(
        60,
        Kind::Call,
        (0x7020, "_dl_entry"),
        (0x7200, "user_entry"),
    );
    let s = b.run(WriterConfig::default(), None);
    assert_has_all(
        &s,
        &[
            (0, 25, 1, "main"),
            (10, 25, 2, "execve"),
            (20, 25, 3, "[syscall]"),
            (30, 60, 0, "_dl_entry"),
            (40, 50, 1, "_dl_start"),
            (60, 60, 1, "user_entry"),
        ],
    );
}

/// The loader's start-up up to a decode error: ld.so's `_start` (named `_dl_start_user`
/// once `_dl_start` returned) runs the initialisers.
fn loader_until_a_gap(b: &mut Build) {
    b.k(0, Kind::Call, (0x1003, "_start"), (0x1100, "_dl_start"));
    b.k_to(
        10,
        Kind::Return,
        (0x1110, "_dl_start"),
        (0x1008, "_dl_start_user", 0),
    );
    b.k(
        20,
        Kind::Call,
        (0x1010, "_dl_start_user"),
        (0x1200, "_dl_init"),
    );
    b.k(30, Kind::Call, (0x1210, "_dl_init"), (0x1300, "call_init"));
}

/// A decode error across the loader's jump to the program: the initialisers returned,
/// ld.so jumped to the program's `_start`, which called `__libc_start_main`, all in the
/// gap. `__libc_start_main`'s caller is the program's `_start` (the ABI says so), not the
/// loader's initialiser that was running: the rest of the run was rooted under
/// `call_init` before.
#[test]
fn a_gap_across_the_jump_to_the_program_keeps_libc_start_main_under_start() {
    let mut b = Build::new();
    loader_until_a_gap(&mut b);
    b.lost(40, (0x2210, "__cxa_atexit"));
    b.k(
        50,
        Kind::Return,
        (0x2220, "__cxa_atexit"),
        (0x2010, "__libc_start_main"),
    );
    b.k(
        60,
        Kind::Call,
        (0x2020, "__libc_start_main"),
        (0x2100, "__libc_start_call_main"),
    );
    b.k(
        70,
        Kind::Call,
        (0x2110, "__libc_start_call_main"),
        (0x3000, "main"),
    );
    let s = b.run(WriterConfig::default(), None);
    assert_has_all(
        &s,
        &[
            (40, 70, 0, "_start"),
            (40, 70, 1, "__libc_start_main"),
            (60, 70, 2, "__libc_start_call_main"),
            (70, 70, 3, "main"),
        ],
    );
    assert!(
        !s.done.iter().any(|d| d.3 == "call_init" && d.1 > 40),
        "the loader's frames carried past the gap: {:?}",
        s.done
    );
}

/// A decode error while `__libc_start_main` resolves a symbol lazily: after it, the
/// trace is in `__libc_start_call_main`, whose only caller is `__libc_start_main`. The
/// resolver's frames ended in the gap; before, they were kept under the new frames.
#[test]
fn a_gap_in_libc_start_main_puts_libc_start_call_main_on_it() {
    let mut b = Build::new();
    b.k(
        0,
        Kind::Call,
        (0x1003, "_start"),
        (0x2000, "__libc_start_main"),
    );
    b.k(
        10,
        Kind::Call,
        (0x2010, "__libc_start_main"),
        (0x4000, "_dl_runtime_resolve_xsave"),
    );
    b.k(
        20,
        Kind::Call,
        (0x4010, "_dl_runtime_resolve_xsave"),
        (0x4100, "_dl_fixup"),
    );
    b.lost(30, (0x2110, "__libc_start_call_main"));
    b.k(
        40,
        Kind::Call,
        (0x2120, "__libc_start_call_main"),
        (0x3000, "main"),
    );
    let s = b.run(WriterConfig::default(), None);
    assert_has_all(
        &s,
        &[
            (0, 40, 0, "_start"),
            (0, 40, 1, "__libc_start_main"),
            (30, 40, 2, "__libc_start_call_main"),
            (40, 40, 3, "main"),
        ],
    );
}

/// A decode error while ld.so maps the program: tracing resumes in `_dl_start_user` (the
/// rest of ld.so's `_start`), which calls `_dl_init`. That is the loader's root frame
/// continuing, not a call made on top of `dl_main`.
#[test]
fn a_gap_back_into_the_loaders_start_lines_up_with_its_root() {
    let mut b = Build::new();
    b.k(0, Kind::Call, (0x1003, "_start"), (0x1100, "_dl_start"));
    b.k(10, Kind::Call, (0x1110, "_dl_start"), (0x1400, "dl_main"));
    b.lost(20, (0x1010, "_dl_start_user"));
    b.k(
        30,
        Kind::Call,
        (0x1015, "_dl_start_user"),
        (0x1200, "_dl_init"),
    );
    let s = b.run(WriterConfig::default(), None);
    assert!(
        has(&s, (30, 30, 1, "_dl_init")),
        "_dl_init not on the loader's root: {:?}",
        s.done
    );
    assert!(
        !s.done.iter().any(|d| d.3 == "dl_main" && d.1 > 20),
        "dl_main carried past the gap: {:?}",
        s.done
    );
}

/// A jump in `dso` from `src` to `dst` at byte `offset` of its symbol.
fn jump_in(b: &mut Build, t: u64, dso: &str, src: (u64, &str), dst: (u64, &str, u64)) {
    let dso = b.s.intern(dso);
    b.k_to(t, Kind::Jump, src, dst);
    b.set_dsos(dso, dso);
}

/// Debian's stripped python3.11: GCC split `PyImport_ImportModuleLevelObject` into a hot
/// part (exported, named) and a `.cold` part with an FDE of its own, named after it. An
/// outer import runs in the cold part when a nested import jumps into it again: the jump
/// goes on within the inner call, it unwinds nothing. Taken as an unwind (the target's
/// function is an ancestor's), the frames between were dropped and the returns after it
/// went past the root.
#[test]
fn a_jump_into_cold_code_an_ancestor_runs_is_not_an_unwind() {
    const IMPORT: &str = "PyImport_ImportModuleLevelObject";
    const COLD: &str = "python3.11+0x4517d5";
    let mut b = Build::new();
    b.k(0, Kind::Call, (0x103, "_start"), (0x200, "main"));
    b.k(10, Kind::Call, (0x210, "main"), (0x300, IMPORT));
    jump_in(
        &mut b,
        15,
        "python3.11",
        (0x310, IMPORT),
        (0x4c8b, COLD, 0x4b6),
    );
    b.k(
        20,
        Kind::Call,
        (0x4d00, COLD),
        (0x600, "import_find_and_load"),
    );
    b.k(
        30,
        Kind::Call,
        (0x610, "import_find_and_load"),
        (0x300, IMPORT),
    );
    jump_in(
        &mut b,
        35,
        "python3.11",
        (0x310, IMPORT),
        (0x4c8b, COLD, 0x4b6),
    );
    b.k(40, Kind::Call, (0x4d00, COLD), (0x700, "getattr"));
    b.k(45, Kind::Return, (0x710, "getattr"), (0x4d05, COLD));
    b.k(
        50,
        Kind::Return,
        (0x4d10, COLD),
        (0x615, "import_find_and_load"),
    );
    b.k(
        60,
        Kind::Return,
        (0x620, "import_find_and_load"),
        (0x4d05, COLD),
    );
    b.k(70, Kind::Return, (0x4d10, COLD), (0x215, "main"));
    b.k(80, Kind::Return, (0x230, "main"), (0x108, "_start"));
    let s = b.run(WriterConfig::default(), None);
    assert_has_all(
        &s,
        &[
            (0, 80, 1, "main"),
            (10, 15, 2, IMPORT),
            (15, 70, 2, COLD),
            (20, 60, 3, "import_find_and_load"),
            (30, 35, 4, IMPORT),
            (35, 50, 4, COLD),
            (40, 45, 5, "getattr"),
        ],
    );
    assert_eq!(s.done.len(), 8, "{:?}", s.done);
}

/// The other way round, in a static function (both parts named after their FDEs): the
/// inner call's cold part jumps back into the hot part while an outer call runs there.
#[test]
fn a_jump_back_from_cold_code_into_an_ancestors_function_is_not_an_unwind() {
    const HOT: &str = "python3.11+0x581350";
    const COLD: &str = "python3.11+0x4517d5";
    let mut b = Build::new();
    b.k(0, Kind::Call, (0x103, "_start"), (0x200, "main"));
    b.k(10, Kind::Call, (0x210, "main"), (0x300, HOT));
    b.k(20, Kind::Call, (0x320, HOT), (0x600, "load"));
    b.k(30, Kind::Call, (0x610, "load"), (0x300, HOT));
    jump_in(
        &mut b,
        35,
        "python3.11",
        (0x310, HOT),
        (0x4c8b, COLD, 0x4b6),
    );
    jump_in(
        &mut b,
        40,
        "python3.11",
        (0x4c90, COLD),
        (0x40e, HOT, 0x10e),
    );
    b.k(50, Kind::Return, (0x420, HOT), (0x615, "load"));
    b.k(60, Kind::Return, (0x620, "load"), (0x325, HOT));
    b.k(70, Kind::Return, (0x330, HOT), (0x215, "main"));
    b.k(80, Kind::Return, (0x230, "main"), (0x108, "_start"));
    let s = b.run(WriterConfig::default(), None);
    assert_has_all(
        &s,
        &[
            (0, 80, 1, "main"),
            (10, 70, 2, HOT),
            (20, 60, 3, "load"),
            (30, 35, 4, HOT),
            (35, 40, 4, COLD),
            (40, 50, 4, HOT),
        ],
    );
    assert_eq!(s.done.len(), 7, "{:?}", s.done);
}

/// `longjmp` back into `main` unwinds the frames between, whether glibc's `__longjmp` is
/// named (libc6-dbg) or only known by its FDE in the stripped libc, and whatever
/// `__longjmp` is named, since its caller is `longjmp`.
#[test]
fn longjmp_unwinds_to_the_frame_that_called_setjmp() {
    for (jumper, dso) in [
        ("__longjmp", "libc.so.6"),
        ("libc.so.6+0x3be30", "libc.so.6"),
        ("libc.so.6+0x3be30", "prog"),
    ] {
        let mut b = Build::new();
        b.k(0, Kind::Call, (0x103, "_start"), (0x200, "main"));
        b.k(10, Kind::Call, (0x210, "main"), (0x900, "_setjmp"));
        b.k(12, Kind::Return, (0x910, "_setjmp"), (0x215, "main"));
        b.k(20, Kind::Call, (0x220, "main"), (0x300, "work"));
        b.k(25, Kind::Call, (0x310, "work"), (0x400, "deeper"));
        b.k(30, Kind::Call, (0x410, "deeper"), (0xa00, "longjmp"));
        b.k(35, Kind::Call, (0xa10, "longjmp"), (0xb00, jumper));
        jump_in(&mut b, 40, dso, (0xb20, jumper), (0x216, "main", 0x16));
        b.k(50, Kind::Return, (0x230, "main"), (0x108, "_start"));
        let s = b.run(WriterConfig::default(), None);
        for slice in [
            (0, 50, 1, "main"),
            (20, 40, 2, "work"),
            (25, 40, 3, "deeper"),
            (30, 40, 4, "longjmp"),
            (35, 40, 5, jumper),
        ] {
            assert!(has(&s, slice), "{jumper}: no {slice:?} in {:?}", s.done);
        }
        assert_eq!(s.done.len(), 7, "{jumper}: {:?}", s.done);
    }
}

/// A stripped program's own unnamed code jumping into a stripped library's code an
/// ancestor runs: only a non-local exit crosses objects like that (here a snapshot began
/// inside the libc's unnamed `__longjmp`, so its caller is unknown).
#[test]
fn an_unnamed_jump_across_objects_into_an_ancestor_unwinds() {
    let mut b = Build::new();
    b.k(
        0,
        Kind::Return,
        (0xb10, "libc.so.6+0x3be90"),
        (0x815, "prog+0x800"),
    );
    b.k(10, Kind::Call, (0x820, "prog+0x800"), (0x300, "prog+0x300"));
    b.k(
        20,
        Kind::Call,
        (0x310, "prog+0x300"),
        (0xb00, "libc.so.6+0x3be30"),
    );
    let dso = b.s.intern("libc.so.6");
    let prog = b.s.intern("prog");
    b.k_to(
        30,
        Kind::Jump,
        (0xb20, "libc.so.6+0x3be30"),
        (0x830, "prog+0x800", 0x30),
    );
    b.set_dsos(dso, prog);
    b.k(40, Kind::Return, (0x840, "prog+0x800"), (0x108, "_start"));
    let s = b.run(WriterConfig::default(), None);
    assert_has_all(
        &s,
        &[
            (0, 40, 1, "prog+0x800"),
            (10, 30, 2, "prog+0x300"),
            (20, 30, 3, "libc.so.6+0x3be30"),
        ],
    );
    assert_eq!(
        s.done.iter().filter(|d| d.3 == "prog+0x800").count(),
        1,
        "{:?}",
        s.done
    );
}

/// Go's preemption signal stopping the code at `at` (10 ns), its handler (20-35 ns)
/// making the code resume in `runtime.asyncPreempt` (40 ns), which calls
/// `runtime.asyncPreempt2` (45-50 ns); the caller adds `asyncPreempt`'s return.
fn preempted_at(b: &mut Build, at: (u64, &str)) {
    b.br(
        10,
        Some(Kind::Async),
        Some(TraceStateChange::End),
        at,
        (0, ""),
        false,
    );
    trace_start(b, 20, (0x400, "runtime.sigtramp"));
    b.k_to(
        30,
        Kind::Return,
        (0x420, "runtime.sigtramp"),
        (0x600, "runtime.sigreturn", 0),
    );
    syscall_stop(b, 35, (0x607, "runtime.sigreturn"));
    trace_start(b, 40, (0x700, "runtime.asyncPreempt"));
    b.k(
        45,
        Kind::Call,
        (0x710, "runtime.asyncPreempt"),
        (0x800, "runtime.asyncPreempt2"),
    );
    b.k(
        50,
        Kind::Return,
        (0x810, "runtime.asyncPreempt2"),
        (0x715, "runtime.asyncPreempt"),
    );
}

/// Go's asynchronous preemption: the handler makes the interrupted code resume in
/// `runtime.asyncPreempt`, as if called where the signal stopped it (the interrupted pc
/// pushed as its return address). `asyncPreempt` runs in the handler's place from the
/// `rt_sigreturn` on and returns to that pc: back in the interrupted frame, which goes on
/// calling. That return is no handler returning into a trampoline (which left
/// `unicode.init` nested in itself).
#[test]
fn a_call_injected_by_a_handler_returns_to_the_interrupted_frame() {
    let mut b = Build::new();
    b.k(
        0,
        Kind::Call,
        (0x103, "runtime.main"),
        (0x200, "unicode.init"),
    );
    preempted_at(&mut b, (0x230, "unicode.init"));
    b.k(
        60,
        Kind::Return,
        (0x720, "runtime.asyncPreempt"),
        (0x230, "unicode.init"),
    );
    b.k(
        70,
        Kind::Call,
        (0x240, "unicode.init"),
        (0x900, "runtime.mapassign"),
    );
    b.k(
        80,
        Kind::Return,
        (0x910, "runtime.mapassign"),
        (0x245, "unicode.init"),
    );
    b.k(
        90,
        Kind::Return,
        (0x250, "unicode.init"),
        (0x108, "runtime.main"),
    );
    let s = b.run(WriterConfig::default(), None);
    assert_has_all(
        &s,
        &[
            (0, 90, 1, "unicode.init"),
            (20, 30, 2, "runtime.sigtramp"),
            (30, 40, 2, "runtime.sigreturn"),
            (40, 60, 2, "runtime.asyncPreempt"),
            (45, 50, 3, "runtime.asyncPreempt2"),
            (70, 80, 2, "runtime.mapassign"),
        ],
    );
    assert_eq!(
        s.done.iter().filter(|d| d.3 == "unicode.init").count(),
        1,
        "{:?}",
        s.done
    );
}

/// With exact times (the emulate backend), a call and the signal that stopped the code
/// before the callee's first instruction share one time: the callee ran for no time, and
/// the stop's `[untraced]` frame starts at once. Spread as for Intel PT's coarse times,
/// the callee was shown running for half the time to the next event.
#[test]
fn exact_times_are_not_spread() {
    let mut b = Build::new();
    b.k(0, Kind::Call, (0x103, "_start"), (0x200, "main"));
    b.k(10, Kind::Call, (0x210, "main"), (0x300, "casgstatus"));
    b.br(
        10,
        Some(Kind::Async),
        Some(TraceStateChange::End),
        (0x300, "casgstatus"),
        (0, ""),
        false,
    );
    trace_start(&mut b, 50, (0x300, "casgstatus"));
    b.k(60, Kind::Return, (0x340, "casgstatus"), (0x215, "main"));
    b.k(70, Kind::Return, (0x230, "main"), (0x108, "_start"));
    let exact = WriterConfig {
        exact_times: true,
        ..WriterConfig::default()
    };
    let s = b.run(exact, None);
    assert_has_all(&s, &[(10, 60, 2, "casgstatus"), (10, 50, 3, "[untraced]")]);
}

/// Go's scheduler resumes a goroutine on another thread than the one it parked on: `gogo`
/// jumps into the middle of a function no frame of this thread runs. On a thread whose
/// root is known, the goroutine runs in `gogo`'s place on top of the thread's scheduler
/// frames (as the true stack has it). Go's threads are rooted in `runtime.clone` (those
/// the runtime makes) and `runtime.rt0_go` (the main one), which perf names with their
/// assembly's ABI0 suffix (`runtime.clone.abi0`): not recognised as roots, the resumed
/// goroutine began a segment nothing lined up with and the thread's whole stack was
/// dropped while it ran (`realworld_sim::go_program` under contention: 89-99.8 % exact).
#[test]
fn a_goroutine_resumed_on_another_thread_runs_on_the_threads_scheduler() {
    for root in ["runtime.clone.abi0", "runtime.rt0_go.abi0"] {
        let mut b = Build::new();
        // The thread starts in its root (after `clone`'s syscall, in the child).
        b.br(
            0,
            None,
            Some(TraceStateChange::Start),
            (0, ""),
            (0x45ed32, root),
            false,
        );
        let path = [
            (0x45e000, "runtime.mstart.abi0"),
            (0x45e100, "runtime.mstart0"),
            (0x45e200, "runtime.mstart1"),
            (0x45e300, "runtime.schedule"),
            (0x45e400, "runtime.execute"),
            (0x459ee0, "gogo"),
        ];
        let mut src = (0x45ed80, root);
        for (i, &dst) in path.iter().enumerate() {
            b.k(2 * (i as u64 + 1), Kind::Call, src, dst);
            src = (dst.0 + 8, dst.1);
        }
        // The goroutine parked on another thread (in `morestack`, at its function's
        // entry): `gogo` resumes it in the middle of that function.
        let park = "runtime.(*scavengerState).park";
        b.k(20, Kind::Jump, (0x459f1e, "gogo"), (0x41f599, park));
        b.k(22, Kind::Jump, (0x41f5a0, park), (0x41f521, park));
        b.k(
            30,
            Kind::Call,
            (0x41f540, park),
            (0x409fc0, "runtime.lock2"),
        );
        b.k(
            40,
            Kind::Return,
            (0x40a027, "runtime.lock2"),
            (0x41f545, park),
        );
        b.k(
            50,
            Kind::Call,
            (0x41f56e, park),
            (0x434300, "runtime.gopark"),
        );
        let s = b.run(WriterConfig::default(), None);
        let at = |t: i64| {
            let mut v: Vec<(usize, &str)> = s
                .done
                .iter()
                .filter(|d| d.0 <= t && t < d.1)
                .map(|d| (d.2, d.3.as_str()))
                .collect();
            v.sort();
            v.into_iter().map(|(_, n)| n).collect::<Vec<_>>()
        };
        let scheduler = [
            root,
            "runtime.mstart.abi0",
            "runtime.mstart0",
            "runtime.mstart1",
            "runtime.schedule",
            "runtime.execute",
        ];
        let with = |top: &[&'static str]| {
            let mut v = scheduler.to_vec();
            v.extend_from_slice(top);
            v
        };
        assert_eq!(at(15), with(&["gogo"]), "{root}: {:?}", s.done);
        assert_eq!(at(25), with(&[park]), "{root}: {:?}", s.done);
        assert_eq!(
            at(35),
            with(&[park, "runtime.lock2"]),
            "{root}: {:?}",
            s.done
        );
        assert_eq!(at(45), with(&[park]), "{root}: {:?}", s.done);
    }
}

/// Go's asynchronous preemption at a function's first instruction, right after the
/// indirect call into it (`runtime.doInit` calling a package's `init`): the signal hid
/// where the call went, and the decoder took `runtime.asyncPreempt`, where the code
/// resumed, for the callee. Its return lands on the entry of the function the call
/// entered, which then runs in `asyncPreempt`'s place, under the caller. Before, that
/// return popped `asyncPreempt` and the caller went on in the function, losing the
/// caller's frame (four `runtime.doInit` where five were open, in the emulate Go test).
#[test]
fn an_injected_call_returning_onto_an_entry_keeps_the_caller() {
    let mut b = Build::new();
    b.k(
        0,
        Kind::Call,
        (0x103, "runtime.main"),
        (0x200, "runtime.doInit"),
    );
    // The indirect call, as the decoder settled it, and the signal stopping the code.
    b.k(
        5,
        Kind::Call,
        (0x271, "runtime.doInit"),
        (0x700, "runtime.asyncPreempt"),
    );
    preempted_at(&mut b, (0x700, "runtime.asyncPreempt"));
    b.k_to(
        60,
        Kind::Return,
        (0x720, "runtime.asyncPreempt"),
        (0x500, "strconv.init", 0),
    );
    b.k(
        70,
        Kind::Call,
        (0x540, "strconv.init"),
        (0x900, "runtime.mapassign"),
    );
    b.k(
        80,
        Kind::Return,
        (0x910, "runtime.mapassign"),
        (0x545, "strconv.init"),
    );
    b.k(
        90,
        Kind::Return,
        (0x550, "strconv.init"),
        (0x276, "runtime.doInit"),
    );
    b.k(
        100,
        Kind::Return,
        (0x280, "runtime.doInit"),
        (0x108, "runtime.main"),
    );
    let s = b.run(WriterConfig::default(), None);
    assert_has_all(
        &s,
        &[
            (0, 100, 1, "runtime.doInit"),
            (60, 90, 2, "strconv.init"),
            (70, 80, 3, "runtime.mapassign"),
        ],
    );
    assert_eq!(
        s.done.iter().filter(|d| d.3 == "runtime.doInit").count(),
        1,
        "{:?}",
        s.done
    );
}
