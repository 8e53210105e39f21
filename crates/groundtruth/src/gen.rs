//! The ground-truth generator: a simulated program whose true stack is known at every
//! instant, emitted as the branch events perf would print for it, then cut the way
//! real recordings are (snapshot start, decode-error gaps, overflow bursts).
//!
//! Time model: the simulation has a fine *true* clock (every branch strictly later than
//! the previous one); the emitted timestamp is the true time rounded down to
//! [`Params::granularity_ns`], as PT timing packets are coarse. Branches between two
//! timing packets therefore share a timestamp and their exact timing is unknowable;
//! the scorer accounts for that with per-timestamp windows ([`ThreadTruth::windows`]).

use crate::rng::Rng;
use ptscope_event::{Event, EventData, Kind, Location, StringTable, Sym, Symbol, Thread};
use ptscope_event::{TraceStateChange, TraceStateChange::*};

/// Name of the synthetic frame magic-trace shows while a user-only trace is off for a syscall.
pub const SYSCALL_FRAME: &str = "[syscall]";
/// Name of the synthetic frame magic-trace shows while tracing is off for another reason.
pub const UNTRACED_FRAME: &str = "[untraced]";

/// Shape of the simulated program and how often each kind of control flow happens.
#[derive(Clone, Debug)]
pub struct Params {
    /// Branches simulated per thread (before any are dropped).
    pub steps: usize,
    /// Number of ordinary functions (besides the thread entry points).
    pub functions: usize,
    /// The stack never grows deeper than this.
    pub max_depth: usize,
    /// Weight of intra-function `jcc`/`jmp`.
    pub w_jump: f64,
    /// Weight of a call to another function.
    pub w_call: f64,
    /// Weight of a return.
    pub w_return: f64,
    /// Weight of a tail call (`jmp` to another function's start).
    pub w_tail: f64,
    /// Weight of a call of the current function by itself.
    pub w_recurse: f64,
    /// Weight of a syscall (user-only tracing: `tr end  syscall` … `tr strt`).
    pub w_syscall: f64,
    /// Weight of a hardware interrupt (user-only tracing: `tr end [async]` … `tr strt`).
    pub w_interrupt: f64,
    /// Weight of an exception unwinding several frames at once.
    pub w_exception: f64,
    /// Weight of a Go goroutine switch (`gopark` → `runtime.mcall` → … → `gogo`, whose
    /// `return` resumes the same goroutine or a parked one).
    pub w_go: f64,
    /// Weight of ordinary code leaving its frame straight into an ancestor 2-6 frames up
    /// (a hand-written unwinder, a coroutine switch, `__builtin_longjmp`): a `jmp` (or
    /// sometimes a `return`) from the top function to the ancestor's resume address (just
    /// after the call it made) or anywhere in its body. The ancestor's function runs in no
    /// frame above it (in a recursion nothing says which level such a jump lands in).
    pub w_unwind_jump: f64,
    /// With goroutine switches: the thread's own goroutine is rooted in `runtime.goexit`
    /// like every other one (as in real Go, where `runtime.main` is started by `gogo`
    /// with `goexit` as its return address) instead of in the thread's entry point.
    pub go_main_in_goexit: bool,
    /// Timing-packet granularity: emitted time = true time rounded down to this.
    pub granularity_ns: u64,
    /// Outer frames (`main`, `run_loop`, …) called at start-up that never return, as in
    /// a server: a snapshot then never shows the root being returned into.
    pub pinned: usize,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            steps: 6000,
            functions: 40,
            max_depth: 16,
            w_jump: 6.0,
            w_call: 2.0,
            w_return: 1.0,
            w_tail: 0.15,
            w_recurse: 0.1,
            w_syscall: 0.03,
            w_interrupt: 0.02,
            w_exception: 0.0,
            w_go: 0.0,
            w_unwind_jump: 0.0,
            go_main_in_goexit: false,
            granularity_ns: 10,
            pinned: 0,
        }
    }
}

/// A scenario recipe: program parameters plus the perturbations applied to the recording.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Short name, used in the table.
    pub name: &'static str,
    /// What the scenario exercises.
    pub description: &'static str,
    /// PRNG seed; the same spec and seed give the same scenario.
    pub seed: u64,
    /// Number of threads (the first is the main thread, pid == tid).
    pub threads: usize,
    /// The simulated program.
    pub params: Params,
    /// Drop a prefix so each thread's trace starts mid-stack, like a snapshot's ring buffer.
    pub snapshot: bool,
    /// Isolated runs of lost events, each reported by a decode error.
    pub gaps: usize,
    /// Bursts of several decode errors close together.
    pub bursts: usize,
    /// Bursts are storms (an overloaded buffer overflowing again and again): 6-12 errors
    /// each, 2-10 events apart, each losing 1-30 events (else 3-5 errors, 3-20 events
    /// apart, each losing 1-7).
    pub storms: bool,
}

/// The true stack of one thread over the interval its trace covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadTruth {
    /// The thread, as in the events.
    pub thread: Thread,
    /// Contiguous pieces `(start_ns, end_ns, stack root first)`, from the thread's first
    /// retained event to its last; every piece has positive length.
    pub timeline: Vec<(u64, u64, Vec<String>)>,
    /// Sorted distinct timestamps of the thread's retained events: the trace cannot say
    /// when, inside `[windows[i], windows[i+1])`, its branches happened.
    pub windows: Vec<u64>,
    /// Timestamps of the retained events that change the stack as the trace shows it
    /// (everything but jumps within one function): coarser windows for `exact_order`.
    pub order_windows: Vec<u64>,
    /// `(decode error time, resume time)` of each gap of lost events.
    pub gaps: Vec<(u64, u64)>,
}

impl ThreadTruth {
    /// Start of the scored interval (the first retained event).
    pub fn start(&self) -> u64 {
        self.timeline.first().map_or(0, |p| p.0)
    }

    /// End of the scored interval (the last retained event).
    pub fn end(&self) -> u64 {
        self.timeline.last().map_or(0, |p| p.1)
    }
}

/// A generated recording with its ground truth.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The recipe's name.
    pub name: &'static str,
    /// The recipe's description.
    pub description: &'static str,
    /// The events, in perf's order (by time across threads).
    pub events: Vec<Event>,
    /// Names the events refer to.
    pub strings: StringTable,
    /// Per-thread truth, in thread order.
    pub truth: Vec<ThreadTruth>,
}

impl Scenario {
    /// Time of the earliest event: what a writer's `earliest_time` should be.
    pub fn earliest_time(&self) -> u64 {
        self.events
            .iter()
            .filter_map(Event::time)
            .min()
            .unwrap_or(0)
    }

    /// The recording as `perf script` text, in the format of magic-trace's fixtures.
    pub fn perf_script(&self) -> String {
        crate::render::perf_script(&self.events, &self.strings)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    TrStrt,
    TrEnd,
    TrEndAsync,
    TrEndSyscall,
    Call,
    Return,
    Jump,
}

/// An address: `func == None` is perf's `0 [unknown]`.
#[derive(Clone, Copy, Debug)]
struct Loc {
    ip: u64,
    func: Option<usize>,
}

const UNKNOWN: Loc = Loc { ip: 0, func: None };

#[derive(Clone, Debug)]
struct Step {
    true_time: u64,
    time: u64,
    op: Op,
    src: Loc,
    dst: Loc,
    /// Frame ids after the branch (function index, or a synthetic id).
    after: Vec<u32>,
}

struct Function {
    name: String,
    start: u64,
    size: u64,
}

struct Program {
    functions: Vec<Function>,
    /// Index of the first of the Go runtime functions (after the callable ones).
    go: usize,
}

/// The Go runtime's goroutine-switch path, in call order, then a goroutine's root.
const GO_NAMES: &[&str] = &[
    "runtime.gopark",
    "runtime.mcall",
    "runtime.park_m",
    "runtime.schedule",
    "runtime.execute",
    "gogo",
    "runtime.goexit",
];
const GO_GOPARK: usize = 0;
const GO_GOGO: usize = 5;
const GO_GOEXIT: usize = 6;

/// Index of the main thread's entry point.
const ENTRY_MAIN: usize = 0;
/// Index of other threads' entry point.
const ENTRY_THREAD: usize = 1;
const FIRST_CALLABLE: usize = 2;

const NAMES: &[&str] = &[
    "main",
    "run_loop",
    "handle_event",
    "parse_message",
    "Book::add_order",
    "Book::cancel",
    "hash_find",
    "hash_insert",
    "__memmove_avx_unaligned_erms",
    "malloc",
    "free",
    "vec_grow",
    "serialize",
    "checksum",
    "log_line",
    "Order::new",
];

impl Program {
    fn new(rng: &mut Rng, n: usize) -> Self {
        let mut functions = Vec::with_capacity(n + FIRST_CALLABLE);
        let mut addr = 0x40_1000u64;
        let mut push = |name: String, rng: &mut Rng| {
            let size = rng.range(4, 64) * 16;
            functions.push(Function {
                name,
                start: addr,
                size,
            });
            addr += size + rng.range(0, 4) * 16;
        };
        push("_start".into(), rng);
        push("start_thread".into(), rng);
        for i in 0..n {
            let name = match NAMES.get(i) {
                Some(s) => (*s).to_string(),
                None => format!("fn_{i}"),
            };
            push(name, rng);
        }
        for name in GO_NAMES {
            push((*name).to_string(), rng);
        }
        let go = functions.len() - GO_NAMES.len();
        Program { functions, go }
    }

    /// A random instruction inside `f` with room for a 5-byte call after it.
    fn ip_in(&self, rng: &mut Rng, f: usize) -> u64 {
        let func = &self.functions[f];
        func.start + 1 + rng.below(func.size - 8)
    }

    fn callable(&self, rng: &mut Rng) -> usize {
        FIRST_CALLABLE + rng.below((self.go - FIRST_CALLABLE) as u64) as usize
    }
}

struct Frame {
    func: usize,
    ret: u64,
}

struct Sim<'a> {
    rng: &'a mut Rng,
    prog: &'a Program,
    p: &'a Params,
    frames: Vec<Frame>,
    /// Synthetic frame on top while tracing is off.
    off: Option<u32>,
    /// Parked goroutines' stacks (each ends in `runtime.gopark`).
    parked: Vec<Vec<Frame>>,
    ip: u64,
    t: u64,
    steps: Vec<Step>,
}

impl Sim<'_> {
    fn ids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.frames.iter().map(|f| f.func as u32).collect();
        v.extend(self.off);
        v
    }

    fn top(&self) -> usize {
        self.frames.last().expect("entry frame never returns").func
    }

    fn emit(&mut self, dt: u64, op: Op, src: Loc, dst: Loc) {
        self.t += dt.max(1);
        let g = self.p.granularity_ns.max(1);
        let after = self.ids();
        self.steps.push(Step {
            true_time: self.t,
            time: self.t - self.t % g,
            op,
            src,
            dst,
            after,
        });
    }

    fn at(&self, ip: u64) -> Loc {
        Loc {
            ip,
            func: Some(self.top()),
        }
    }

    fn step(&mut self) {
        let p = self.p;
        let depth = self.frames.len();
        // The entry frame and the pinned ones never return.
        let floor = 1 + p.pinned;
        let room = 1.0 - depth as f64 / p.max_depth as f64;
        let can_call = depth < p.max_depth;
        let weights = [
            p.w_jump,
            if can_call { p.w_call * room } else { 0.0 },
            if depth > floor { p.w_return } else { 0.0 },
            if depth > floor { p.w_tail } else { 0.0 },
            if can_call { p.w_recurse } else { 0.0 },
            p.w_syscall,
            p.w_interrupt,
            if depth >= floor + 3 {
                p.w_exception
            } else {
                0.0
            },
            if depth > floor { p.w_go } else { 0.0 },
            if depth >= floor + 3 {
                p.w_unwind_jump
            } else {
                0.0
            },
        ];
        let total: f64 = weights.iter().sum();
        let mut x = self.rng.unit() * total;
        let mut choice = 0;
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                choice = i;
                break;
            }
            x -= w;
        }
        let top = self.top();
        let site = self.prog.ip_in(self.rng, top);
        let src = self.at(site);
        match choice {
            0 => {
                let to = self.prog.ip_in(self.rng, top);
                let dst = self.at(to);
                self.ip = to;
                let dt = self.rng.range(1, 3);
                self.emit(dt, Op::Jump, src, dst);
            }
            1 | 4 => {
                let callee = if choice == 1 {
                    self.prog.callable(self.rng)
                } else {
                    top
                };
                self.frames.push(Frame {
                    func: callee,
                    ret: site + 5,
                });
                self.ip = self.prog.functions[callee].start;
                let dst = self.at(self.ip);
                let dt = self.rng.range(2, 12);
                self.emit(dt, Op::Call, src, dst);
            }
            2 => {
                let ret = self.frames.pop().expect("depth > 1").ret;
                self.ip = ret;
                let dst = self.at(ret);
                let dt = self.rng.range(2, 12);
                self.emit(dt, Op::Return, src, dst);
            }
            3 => {
                let callee = self.prog.callable(self.rng);
                self.frames.last_mut().expect("non-empty").func = callee;
                self.ip = self.prog.functions[callee].start;
                let dst = self.at(self.ip);
                let dt = self.rng.range(1, 6);
                self.emit(dt, Op::Jump, src, dst);
            }
            5 | 6 => {
                // The trace stops and restarts; in between the program is in the kernel.
                let (op, synthetic, pc, dur) = if choice == 5 {
                    (Op::TrEndSyscall, SYSCALL_ID, site, (100, 1500))
                } else if self.rng.chance(0.5) {
                    (Op::TrEnd, UNTRACED_ID, self.ip, (300, 3000))
                } else {
                    (Op::TrEndAsync, UNTRACED_ID, self.ip, (300, 3000))
                };
                let from = self.at(pc);
                self.off = Some(synthetic);
                let dt = self.rng.range(1, 6);
                self.emit(dt, op, from, UNKNOWN);
                self.off = None;
                // After a syscall execution resumes at the next instruction.
                self.ip = if op == Op::TrEndSyscall { pc + 2 } else { pc };
                let back = self.at(self.ip);
                let dur = self.rng.range(dur.0, dur.1);
                self.emit(dur, Op::TrStrt, UNKNOWN, back);
            }
            8 => self.go_switch(site),
            9 => self.unwind_jump(src),
            _ => {
                // Unwind to a handler several frames up: perf shows a `return` from the
                // raiser that lands inside the handler's function, not at a return address.
                let h = floor + self.rng.below((depth - floor - 2) as u64) as usize;
                self.frames.truncate(h + 1);
                self.ip = self.prog.ip_in(self.rng, self.top());
                let dst = self.at(self.ip);
                let dt = self.rng.range(5, 30);
                self.emit(dt, Op::Return, src, dst);
            }
        }
    }
}

impl Sim<'_> {
    /// Ordinary code leaves the top frame straight into an ancestor 2-6 frames up (see
    /// [`Params::w_unwind_jump`]); the frames between are dropped. Only an ancestor whose
    /// function no frame above it runs: in a recursion, nothing in the trace says which
    /// level a jump into the function's body lands in (an ordinary jump instead).
    fn unwind_jump(&mut self, src: Loc) {
        let depth = self.frames.len();
        let floor = 1 + self.p.pinned;
        let lowest = floor.max(depth.saturating_sub(7));
        let candidates: Vec<usize> = (lowest..depth - 2)
            .filter(|&h| {
                let f = self.frames[h].func;
                self.frames[h + 1..].iter().all(|fr| fr.func != f)
            })
            .collect();
        let jump = self.rng.chance(0.75);
        let at_resume = self.rng.chance(0.5);
        if candidates.is_empty() {
            let top = self.top();
            self.ip = self.prog.ip_in(self.rng, top);
            let dst = self.at(self.ip);
            self.emit(1, Op::Jump, src, dst);
            return;
        }
        let h = candidates[self.rng.below(candidates.len() as u64) as usize];
        let resume = self.frames[h + 1].ret;
        self.frames.truncate(h + 1);
        self.ip = if at_resume {
            resume
        } else {
            self.prog.ip_in(self.rng, self.top())
        };
        let dst = self.at(self.ip);
        let dt = self.rng.range(2, 12);
        self.emit(dt, if jump { Op::Jump } else { Op::Return }, src, dst);
    }

    /// A goroutine parks: the switch path is called on top of its stack, and the
    /// `return` from `gogo` resumes, inside `runtime.gopark`, either the same goroutine
    /// or a parked one (whose stack this thread's trace may never have shown).
    fn go_switch(&mut self, site: u64) {
        let mut from = site;
        for k in GO_GOPARK..=GO_GOGO {
            let f = self.prog.go + k;
            let src = self.at(from);
            self.frames.push(Frame {
                func: f,
                ret: from + 5,
            });
            self.ip = self.prog.functions[f].start;
            let dst = self.at(self.ip);
            let dt = self.rng.range(2, 12);
            self.emit(dt, Op::Call, src, dst);
            from = self.prog.ip_in(self.rng, f);
        }
        let src = self.at(from);
        let gopark_at = self.frames.len() - (GO_GOGO - GO_GOPARK) - 1;
        self.frames.truncate(gopark_at + 1);
        if !self.parked.is_empty() && self.rng.chance(0.5) {
            let k = self.rng.below(self.parked.len() as u64) as usize;
            let next = self.parked.swap_remove(k);
            let mine = std::mem::replace(&mut self.frames, next);
            self.parked.push(mine);
        }
        self.ip = self.prog.ip_in(self.rng, self.prog.go + GO_GOPARK);
        let dst = self.at(self.ip);
        let dt = self.rng.range(2, 12);
        self.emit(dt, Op::Return, src, dst);
    }
}

const SYSCALL_ID: u32 = u32::MAX;
const UNTRACED_ID: u32 = u32::MAX - 1;

/// Runs one thread's program from its entry point; the first step is the `tr strt` into it.
fn simulate(rng: &mut Rng, prog: &Program, p: &Params, entry: usize, t0: u64) -> Vec<Step> {
    let mut sim = Sim {
        rng,
        prog,
        p,
        frames: vec![Frame {
            func: entry,
            ret: 0,
        }],
        off: None,
        parked: Vec::new(),
        ip: prog.functions[entry].start,
        t: t0 - 1,
        steps: Vec::with_capacity(p.steps + 64),
    };
    let dst = sim.at(sim.ip);
    sim.emit(1, Op::TrStrt, UNKNOWN, dst);
    for k in 0..p.pinned {
        let site = prog.ip_in(sim.rng, sim.top());
        let src = sim.at(site);
        let callee = FIRST_CALLABLE + k;
        sim.frames.push(Frame {
            func: callee,
            ret: site + 5,
        });
        sim.ip = prog.functions[callee].start;
        let dst = sim.at(sim.ip);
        sim.emit(3, Op::Call, src, dst);
    }
    if p.w_go > 0.0 {
        // Two goroutines already parked when the thread starts, rooted in goexit.
        for _ in 0..2 {
            let mut g = vec![Frame {
                func: prog.go + GO_GOEXIT,
                ret: 0,
            }];
            // Each frame returns into its caller, just after a call site inside it.
            let n = sim.rng.range(1, 4);
            for k in 0..=n {
                let caller = g[g.len() - 1].func;
                let ret = prog.ip_in(sim.rng, caller) + 5;
                let func = if k == n {
                    prog.go + GO_GOPARK
                } else {
                    prog.callable(sim.rng)
                };
                g.push(Frame { func, ret });
            }
            sim.parked.push(g);
        }
    }
    while sim.steps.len() < p.steps {
        sim.step();
    }
    sim.steps
}

enum Item {
    Step(usize),
    Error {
        time: u64,
        ip: Option<u64>,
        lost: bool,
    },
    Resume {
        time: u64,
        dst: Loc,
    },
}

/// Picks non-overlapping `[i, j)` runs of steps to drop, inside `lo..hi`.
fn pick_gaps(rng: &mut Rng, spec: &Spec, lo: usize, hi: usize) -> Vec<(usize, usize)> {
    let mut gaps: Vec<(usize, usize)> = Vec::new();
    if hi <= lo + 50 {
        return gaps;
    }
    for _ in 0..spec.gaps {
        let len = rng.range(10, 200) as usize;
        let i = rng.range(lo as u64, (hi - len - 1) as u64) as usize;
        gaps.push((i, i + len));
    }
    for _ in 0..spec.bursts {
        if spec.storms {
            let mut i = rng.range(lo as u64, (hi - 500) as u64) as usize;
            for _ in 0..rng.range(6, 12) {
                let len = rng.range(1, 30) as usize;
                gaps.push((i, i + len));
                i += len + rng.range(2, 10) as usize;
            }
            continue;
        }
        let mut i = rng.range(lo as u64, (hi - 200) as u64) as usize;
        for _ in 0..rng.range(3, 5) {
            let len = rng.range(1, 8) as usize;
            gaps.push((i, i + len));
            i += len + rng.range(3, 20) as usize;
        }
    }
    gaps.sort_unstable();
    // Keep a few events between gaps so each error is followed by a resumed trace.
    let mut kept: Vec<(usize, usize)> = Vec::new();
    for g in gaps {
        let clear = match kept.last() {
            Some(k) => g.0 > k.1 + 2,
            None => true,
        };
        if clear && g.1 < hi {
            kept.push(g);
        }
    }
    kept
}

/// Generates the scenario a recipe describes.
pub fn generate(spec: &Spec) -> Scenario {
    let mut rng = Rng::new(spec.seed);
    let prog = Program::new(&mut rng, spec.params.functions);
    let g = spec.params.granularity_ns.max(1);
    let pid = 4242u32;

    let mut strings = StringTable::new();
    let dso = strings.intern("prog");
    let unknown_dso = strings.intern("[unknown]");
    let unknown_name = strings.intern("[unknown @ 0x0 ([unknown])]");
    let fsyms: Vec<Sym> = prog
        .functions
        .iter()
        .map(|f| strings.intern(&f.name))
        .collect();
    let overflow = strings.intern("Overflow packet");
    let lost = strings.intern("Lost trace data");
    let location = |l: Loc| match l.func {
        Some(f) => Location {
            ip: l.ip,
            symbol: Symbol::FromPerf(fsyms[f]),
            offset: l.ip - prog.functions[f].start,
            dso: Some(dso),
        },
        None => Location {
            ip: 0,
            symbol: Symbol::FromPerf(unknown_name),
            offset: 0,
            dso: Some(unknown_dso),
        },
    };
    let frame_name = |id: u32| -> String {
        match id {
            SYSCALL_ID => SYSCALL_FRAME.to_string(),
            UNTRACED_ID => UNTRACED_FRAME.to_string(),
            f => prog.functions[f as usize].name.clone(),
        }
    };

    let mut tagged: Vec<(u64, usize, Event)> = Vec::new();
    let mut truth = Vec::with_capacity(spec.threads);
    for k in 0..spec.threads {
        let thread = Thread {
            pid: Some(pid),
            tid: Some(pid + 7 * k as u32),
        };
        let entry = if spec.params.w_go > 0.0 && spec.params.go_main_in_goexit {
            prog.go + GO_GOEXIT
        } else if k == 0 {
            ENTRY_MAIN
        } else {
            ENTRY_THREAD
        };
        let t0 = 1_000_000_000 + 1000 * k as u64;
        let t0 = t0 - t0 % g;
        let steps = simulate(&mut rng, &prog, &spec.params, entry, t0);
        let n = steps.len();

        let s = if spec.snapshot {
            // Start where the program is deep in its stack, as a ring buffer would.
            let want = 4.min(spec.params.max_depth / 2).max(2);
            (n / 4..n / 2)
                .find(|&i| steps[i - 1].after.len() >= want && steps[i].time > steps[i - 1].time)
                .unwrap_or(n / 4)
        } else {
            0
        };
        let gaps = pick_gaps(&mut rng, spec, s + 20, n - 20);

        let mut items = Vec::with_capacity(n - s + 2 * gaps.len());
        let mut gap_times = Vec::with_capacity(gaps.len());
        let mut i = s;
        let mut gi = 0;
        while i < n {
            if gi < gaps.len() && gaps[gi].0 == i {
                let (a, b) = gaps[gi];
                gi += 1;
                let prev = &steps[a - 1];
                let err_time = prev.time;
                items.push(Item::Error {
                    time: err_time,
                    ip: (prev.dst.ip != 0).then_some(prev.dst.ip),
                    lost: rng.chance(0.3),
                });
                let next = &steps[b];
                gap_times.push((err_time, next.time));
                if next.op != Op::TrStrt {
                    // perf resumes with a `tr strt` where decoding picked up again.
                    items.push(Item::Resume {
                        time: next.time,
                        dst: next.src,
                    });
                }
                i = b;
                continue;
            }
            items.push(Item::Step(i));
            i += 1;
        }

        let w0 = steps[s].time;
        let wend = steps[n - 1].time;
        let mut windows: Vec<u64> = items
            .iter()
            .map(|it| match it {
                Item::Step(i) => steps[*i].time,
                Item::Error { time, .. } | Item::Resume { time, .. } => *time,
            })
            .collect();
        windows.dedup();
        let mut order_windows: Vec<u64> = items
            .iter()
            .filter_map(|it| match it {
                Item::Step(i) => {
                    let st = &steps[*i];
                    let local = st.op == Op::Jump && st.src.func == st.dst.func;
                    (!local).then_some(st.time)
                }
                Item::Error { time, .. } | Item::Resume { time, .. } => Some(*time),
            })
            .collect();
        order_windows.dedup();

        // The truth includes what happened inside gaps: the program did not stop.
        let mut timeline = Vec::new();
        let mut cur: Vec<u32> = if s == 0 {
            Vec::new()
        } else {
            steps[s - 1].after.clone()
        };
        let mut start = w0;
        for st in &steps[s..] {
            if st.true_time >= wend {
                break;
            }
            if st.after != cur {
                if st.true_time > start {
                    timeline.push((
                        start,
                        st.true_time,
                        cur.iter().map(|&f| frame_name(f)).collect(),
                    ));
                    start = st.true_time;
                }
                cur.clone_from(&st.after);
            }
        }
        if wend > start {
            timeline.push((start, wend, cur.iter().map(|&f| frame_name(f)).collect()));
        }
        truth.push(ThreadTruth {
            thread,
            timeline,
            windows,
            order_windows,
            gaps: gap_times,
        });

        for it in items {
            let ev = match it {
                Item::Step(i) => {
                    let st = &steps[i];
                    let (change, kind): (Option<TraceStateChange>, Option<Kind>) = match st.op {
                        Op::TrStrt => (Some(Start), None),
                        Op::TrEnd => (Some(End), None),
                        Op::TrEndAsync => (Some(End), Some(Kind::Async)),
                        Op::TrEndSyscall => (Some(End), Some(Kind::Syscall)),
                        Op::Call => (None, Some(Kind::Call)),
                        Op::Return => (None, Some(Kind::Return)),
                        Op::Jump => (None, Some(Kind::Jump)),
                    };
                    Event::Ok {
                        thread,
                        time: st.time,
                        in_transaction: false,
                        data: EventData::Trace {
                            change,
                            kind,
                            src: strings.intern_location(location(st.src)),
                            dst: strings.intern_location(location(st.dst)),
                        },
                    }
                }
                Item::Error { time, ip, lost: l } => Event::DecodeError {
                    thread,
                    time: Some(time),
                    ip,
                    message: if l { lost } else { overflow },
                },
                Item::Resume { time, dst } => Event::Ok {
                    thread,
                    time,
                    in_transaction: false,
                    data: EventData::Trace {
                        change: Some(Start),
                        kind: None,
                        src: strings.intern_location(location(UNKNOWN)),
                        dst: strings.intern_location(location(dst)),
                    },
                },
            };
            tagged.push((ev.time().unwrap_or(0), k, ev));
        }
    }
    // perf prints events in time order across threads; ties keep thread order.
    tagged.sort_by_key(|(t, _, _)| *t);
    Scenario {
        name: spec.name,
        description: spec.description,
        events: tagged.into_iter().map(|(_, _, e)| e).collect(),
        strings,
        truth,
    }
}

/// The standard scenarios of the fidelity table, all derived from `seed`.
pub fn standard_specs(seed: u64) -> Vec<Spec> {
    let base = Params::default();
    let spec =
        |name, description, threads, params: Params, snapshot, gaps, bursts, salt: u64| Spec {
            name,
            description,
            seed: seed.wrapping_mul(0x100_0000_01b3).wrapping_add(salt),
            threads,
            params,
            snapshot,
            gaps,
            bursts,
            storms: false,
        };
    vec![
        spec(
            "clean",
            "whole execution from the thread's entry, no loss",
            1,
            base.clone(),
            false,
            0,
            0,
            1,
        ),
        spec(
            "snapshot",
            "trace starts mid-stack; `_start > main > run_loop` never return, so the root is never seen",
            1,
            Params {
                pinned: 2,
                ..base.clone()
            },
            true,
            0,
            0,
            2,
        ),
        spec(
            "snapshot_root_returned",
            "trace starts mid-stack; the program later returns into its outermost frame",
            1,
            base.clone(),
            true,
            0,
            0,
            12,
        ),
        spec(
            "decode_error_gaps",
            "3 runs of 10-200 lost events, each a decode error then `tr strt`",
            1,
            base.clone(),
            false,
            3,
            0,
            3,
        ),
        spec(
            "overflow_bursts",
            "2 bursts of 3-5 decode errors a few events apart",
            1,
            base.clone(),
            false,
            0,
            2,
            4,
        ),
        Spec {
            storms: true,
            ..spec(
                "storm_bursts",
                "3 storms of 6-12 decode errors 2-10 events apart, each losing 1-30 events",
                1,
                base.clone(),
                false,
                0,
                3,
                16,
            )
        },
        spec(
            "snapshot_gaps_bursts",
            "snapshot start + 2 gaps + 1 burst",
            1,
            base.clone(),
            true,
            2,
            1,
            5,
        ),
        spec(
            "multi_thread",
            "4 threads, each a snapshot starting mid-stack, interleaved by time",
            4,
            Params {
                steps: 3000,
                ..base.clone()
            },
            true,
            0,
            0,
            6,
        ),
        spec(
            "multi_thread_clean",
            "4 threads traced from their entry points, interleaved by time",
            4,
            Params {
                steps: 3000,
                ..base.clone()
            },
            false,
            0,
            0,
            7,
        ),
        spec(
            "deep_recursion",
            "self-recursion up to depth 60",
            1,
            Params {
                max_depth: 60,
                w_recurse: 1.5,
                ..base.clone()
            },
            false,
            0,
            0,
            8,
        ),
        spec(
            "tail_calls_heavy",
            "one branch in ~6 that changes the stack is a tail call",
            1,
            Params {
                w_tail: 0.6,
                ..base.clone()
            },
            false,
            0,
            0,
            9,
        ),
        spec(
            "syscalls_interrupts",
            "frequent syscalls and interrupts (user-only tracing)",
            1,
            Params {
                w_syscall: 0.4,
                w_interrupt: 0.3,
                ..base.clone()
            },
            false,
            0,
            0,
            10,
        ),
        spec(
            "go_switches",
            "Go goroutine switches: mcall … gogo, resuming the same or a parked goroutine",
            1,
            Params {
                w_go: 0.05,
                go_main_in_goexit: true,
                ..base.clone()
            },
            false,
            0,
            0,
            13,
        ),
        spec(
            "go_switches_thread_root",
            "as go_switches, but the thread's own goroutine is rooted in `_start` (not Go-like)",
            1,
            Params {
                w_go: 0.05,
                ..base.clone()
            },
            false,
            0,
            0,
            13,
        ),
        spec(
            "unwind_jumps",
            "ordinary code jumping (or returning) straight into an ancestor 2-6 frames up",
            1,
            Params {
                w_unwind_jump: 0.08,
                ..base.clone()
            },
            false,
            0,
            0,
            14,
        ),
        spec(
            "unwind_jumps_gaps",
            "unwind_jumps in a snapshot with 2 gaps and 1 burst of decode errors",
            1,
            Params {
                w_unwind_jump: 0.08,
                ..base.clone()
            },
            true,
            2,
            1,
            15,
        ),
        spec(
            "exceptions",
            "exceptions unwinding 2+ frames (a `return` landing in an ancestor)",
            1,
            Params {
                w_exception: 0.08,
                ..base.clone()
            },
            false,
            0,
            0,
            11,
        ),
    ]
}
