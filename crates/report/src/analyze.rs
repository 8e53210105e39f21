//! One streaming pass over a trace: every thread's slices folded into a calling-context
//! tree (one node per distinct stack of functions, with its calls, total and self time),
//! the slowest individual calls, and the durations of the function in focus.
//!
//! Memory grows with the number of distinct stacks and functions, not with the number
//! of calls: a trace of 100 M calls of the same few paths takes a few kilobytes.

use ptscope_fxt::reader::{EventKind, Head, ReadError};
use ptscope_fxt::stream::StreamReader;
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Read;

/// A function's index in [`Analysis::names`].
pub type FuncId = u32;

/// The parent of a root node.
pub const NO_NODE: u32 = u32::MAX;

/// The name of the process ptscope gives its own "trace info" track.
const INFO_PROCESS: &str = "ptscope";

/// How the trace was recorded, as far as the trace says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Every call and return was traced (Intel PT, or no marker saying otherwise).
    Exact,
    /// Every call and return, emulated under qemu (`--backend emulate`).
    Emulate,
    /// Sampled call stacks: a slice is a run of samples in one frame, so counts and
    /// times are estimates.
    Sampled,
}

impl Source {
    /// Whether call counts are exact.
    pub fn exact(self) -> bool {
        self != Source::Sampled
    }
}

/// One distinct stack of functions on one thread.
#[derive(Clone, Debug)]
pub struct Node {
    /// The innermost function.
    pub func: FuncId,
    /// The caller's node, or [`NO_NODE`].
    pub parent: u32,
    /// Slices closed at this node.
    pub calls: u64,
    /// Their durations, summed.
    pub total_ns: u64,
    /// Their durations less their callees', summed.
    pub self_ns: u64,
}

/// A thread's calling-context tree and what else was seen on it.
#[derive(Clone, Debug)]
pub struct ThreadTree {
    /// The process koid in the trace.
    pub pid: u64,
    /// The thread koid in the trace.
    pub tid: u64,
    /// Nodes; a parent always comes before its children.
    pub nodes: Vec<Node>,
    /// First and last timestamps of the thread's events, in ns.
    pub first_ns: u64,
    /// Last timestamp, in ns.
    pub last_ns: u64,
    /// Slices still open when the trace ended, closed at the thread's last timestamp.
    pub cut_off: u64,
    /// Ends with no open slice (ignored).
    pub unmatched_ends: u64,
}

impl ThreadTree {
    /// Slices closed on the thread.
    pub fn calls(&self) -> u64 {
        self.nodes.iter().map(|n| n.calls).sum()
    }

    /// Time spent in the thread's outermost slices.
    pub fn busy_ns(&self) -> u64 {
        self.nodes
            .iter()
            .filter(|n| n.parent == NO_NODE)
            .map(|n| n.total_ns)
            .sum()
    }

    /// The functions of the stack at `node`, outermost first.
    pub fn path(&self, node: u32) -> Vec<FuncId> {
        let mut out = Vec::new();
        let mut n = node;
        while let Some(x) = self.nodes.get(n as usize) {
            out.push(x.func);
            n = x.parent;
        }
        out.reverse();
        out
    }
}

/// One slow call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlowCall {
    /// Index into [`Analysis::threads`].
    pub thread: usize,
    /// Its node in that thread's tree.
    pub node: u32,
    /// When it started (ns, trace clock).
    pub start_ns: u64,
    /// How long it took.
    pub dur_ns: u64,
}

/// What to look for while reading.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Keep every duration of the function with exactly this name (percentiles).
    pub function: Option<String>,
    /// How many of the slowest calls to keep.
    pub slowest: usize,
}

/// Everything one pass learned.
#[derive(Clone, Debug)]
pub struct Analysis {
    /// Function names, by [`FuncId`].
    pub names: Vec<Box<str>>,
    /// Threads with slices, in the order first seen.
    pub threads: Vec<ThreadTree>,
    /// Process names by koid (the last name given).
    pub process_names: FxHashMap<u64, String>,
    /// Thread names by koid (the last name given).
    pub thread_names: FxHashMap<u64, String>,
    /// How the trace was recorded.
    pub source: Source,
    /// The instants of ptscope's "trace info" track (clock, exec, sampling notes).
    pub markers: Vec<String>,
    /// The slowest calls, slowest first.
    pub slowest: Vec<SlowCall>,
    /// The function in focus, if it was found.
    pub focus: Option<FuncId>,
    /// Every duration of the function in focus, in ns, sorted.
    pub focus_durations: Vec<u64>,
    /// First and last timestamps of the whole trace, in ns.
    pub first_ns: u64,
    /// Last timestamp, in ns.
    pub last_ns: u64,
    /// Records read.
    pub records: u64,
    /// Why reading stopped early: what came before is summarised all the same.
    pub error: Option<ReadError>,
}

impl Analysis {
    /// The name of function `f`.
    pub fn name(&self, f: FuncId) -> &str {
        self.names.get(f as usize).map_or("?", |s| s)
    }

    /// The process's and the thread's names of thread index `t`, as the trace names
    /// them (`[process KOID]` / `[thread KOID]` where it names none).
    pub fn names_of(&self, t: usize) -> (String, String) {
        let Some(th) = self.threads.get(t) else {
            return ("?".into(), "?".into());
        };
        let p = self
            .process_names
            .get(&th.pid)
            .cloned()
            .unwrap_or_else(|| format!("[process {}]", th.pid));
        let n = self
            .thread_names
            .get(&th.tid)
            .cloned()
            .unwrap_or_else(|| format!("[thread {}]", th.tid));
        (p, n)
    }

    /// "process / thread" for thread index `t`.
    pub fn thread_label(&self, t: usize) -> String {
        let (p, n) = self.names_of(t);
        format!("{p} / {n}")
    }

    /// Functions whose name contains `needle` (case-insensitive), most called first.
    pub fn similar_names(&self, needle: &str) -> Vec<&str> {
        let n = needle.to_lowercase();
        let mut calls: FxHashMap<FuncId, u64> = FxHashMap::default();
        for t in &self.threads {
            for node in &t.nodes {
                *calls.entry(node.func).or_default() += node.calls;
            }
        }
        let mut v: Vec<(u64, &str)> = self
            .names
            .iter()
            .enumerate()
            .filter(|(_, s)| s.to_lowercase().contains(&n))
            .map(|(i, s)| (calls.get(&(i as u32)).copied().unwrap_or(0), &**s))
            .collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        v.into_iter().map(|(_, s)| s).collect()
    }
}

/// A slice open on a thread.
struct Frame {
    node: u32,
    start: u64,
    /// Time spent in closed callees.
    child: u64,
    /// A complete event's end: the frame closes by itself there.
    end: Option<u64>,
}

struct ThreadState {
    tree: ThreadTree,
    children: FxHashMap<(u32, FuncId), u32>,
    stack: Vec<Frame>,
}

/// What [`analyze`] builds as it reads.
struct Builder<'o> {
    opts: &'o Options,
    names: Vec<Box<str>>,
    ids: FxHashMap<Box<str>, FuncId>,
    threads: Vec<ThreadState>,
    by_koid: FxHashMap<(u64, u64), usize>,
    last_thread: Option<((u64, u64), usize)>,
    info_pid: Option<u64>,
    process_names: FxHashMap<u64, String>,
    thread_names: FxHashMap<u64, String>,
    markers: Vec<String>,
    slowest: BinaryHeap<Reverse<(u64, u64, usize, u32)>>,
    focus: Option<FuncId>,
    focus_durations: Vec<u64>,
    first_ns: Option<u64>,
    last_ns: u64,
}

impl Builder<'_> {
    fn func(&mut self, name: &str) -> FuncId {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as FuncId;
        let boxed: Box<str> = name.into();
        self.names.push(boxed.clone());
        self.ids.insert(boxed, id);
        if self.opts.function.as_deref() == Some(name) {
            self.focus = Some(id);
        }
        id
    }

    fn thread(&mut self, pid: u64, tid: u64) -> usize {
        if let Some((k, i)) = self.last_thread {
            if k == (pid, tid) {
                return i;
            }
        }
        let next = self.threads.len();
        let i = *self.by_koid.entry((pid, tid)).or_insert(next);
        if i == next {
            self.threads.push(ThreadState {
                tree: ThreadTree {
                    pid,
                    tid,
                    nodes: Vec::new(),
                    first_ns: u64::MAX,
                    last_ns: 0,
                    cut_off: 0,
                    unmatched_ends: 0,
                },
                children: FxHashMap::default(),
                stack: Vec::new(),
            });
        }
        self.last_thread = Some(((pid, tid), i));
        i
    }

    /// Closes the innermost open slice of thread `t` at `end`.
    fn close(&mut self, t: usize, end: u64) {
        let th = &mut self.threads[t];
        let Some(f) = th.stack.pop() else {
            return;
        };
        let dur = end.saturating_sub(f.start);
        let node = &mut th.tree.nodes[f.node as usize];
        node.calls += 1;
        node.total_ns += dur;
        node.self_ns += dur.saturating_sub(f.child);
        let func = node.func;
        if let Some(p) = th.stack.last_mut() {
            p.child += dur;
        }
        if self.opts.slowest > 0 {
            let item = Reverse((dur, f.start, t, f.node));
            if self.slowest.len() < self.opts.slowest {
                self.slowest.push(item);
            } else if self.slowest.peek().is_some_and(|m| (m.0).0 < dur) {
                self.slowest.pop();
                self.slowest.push(item);
            }
        }
        if self.focus == Some(func) {
            self.focus_durations.push(dur);
        }
    }

    /// Closes the complete events of thread `t` that ended by `ts`.
    fn close_completes(&mut self, t: usize, ts: u64) {
        while let Some(end) = self.threads[t].stack.last().and_then(|f| f.end) {
            if end > ts {
                break;
            }
            self.close(t, end);
        }
    }

    fn open(&mut self, t: usize, name: &str, ts: u64, end: Option<u64>) {
        let func = self.func(name);
        let th = &mut self.threads[t];
        let parent = th.stack.last().map_or(NO_NODE, |f| f.node);
        let nodes = &mut th.tree.nodes;
        let node = *th.children.entry((parent, func)).or_insert_with(|| {
            nodes.push(Node {
                func,
                parent,
                calls: 0,
                total_ns: 0,
                self_ns: 0,
            });
            (nodes.len() - 1) as u32
        });
        th.stack.push(Frame {
            node,
            start: ts,
            child: 0,
            end,
        });
    }

    fn finish(mut self, records: u64, error: Option<ReadError>) -> Analysis {
        // Slices the trace never closed end at their thread's last timestamp.
        for t in 0..self.threads.len() {
            let last = self.threads[t].tree.last_ns;
            while let Some(f) = self.threads[t].stack.last() {
                let end = f.end.unwrap_or(last).min(last.max(f.start));
                if f.end.is_none() {
                    self.threads[t].tree.cut_off += 1;
                }
                self.close(t, end);
            }
        }
        let mut slowest: Vec<SlowCall> = self
            .slowest
            .into_iter()
            .map(|Reverse((dur_ns, start_ns, thread, node))| SlowCall {
                thread,
                node,
                start_ns,
                dur_ns,
            })
            .collect();
        slowest.sort_by(|a, b| b.dur_ns.cmp(&a.dur_ns).then(a.start_ns.cmp(&b.start_ns)));
        let mut focus_durations = self.focus_durations;
        focus_durations.sort_unstable();
        let sampled = ptscope_output::SAMPLED_MARKER
            .split(':')
            .next()
            .unwrap_or_default();
        let source = if self.markers.iter().any(|m| m.starts_with(sampled)) {
            Source::Sampled
        } else if self.markers.iter().any(|m| m.starts_with("clock:")) {
            Source::Emulate
        } else {
            Source::Exact
        };
        Analysis {
            names: self.names,
            threads: self
                .threads
                .into_iter()
                .map(|t| t.tree)
                .filter(|t| !t.nodes.is_empty())
                .collect(),
            process_names: self.process_names,
            thread_names: self.thread_names,
            source,
            markers: self.markers,
            slowest,
            focus: self.focus,
            focus_durations,
            first_ns: self.first_ns.unwrap_or(0),
            last_ns: self.last_ns,
            records,
            error,
        }
    }
}

/// Reads the uncompressed FXT stream `src` once and summarises it. A read error ends the
/// pass: what was read before is summarised and the error kept in [`Analysis::error`].
pub fn analyze(src: impl Read, opts: &Options) -> Analysis {
    let mut b = Builder {
        opts,
        names: Vec::new(),
        ids: FxHashMap::default(),
        threads: Vec::new(),
        by_koid: FxHashMap::default(),
        last_thread: None,
        info_pid: None,
        process_names: FxHashMap::default(),
        thread_names: FxHashMap::default(),
        markers: Vec::new(),
        slowest: BinaryHeap::new(),
        focus: None,
        focus_durations: Vec::new(),
        first_ns: None,
        last_ns: 0,
    };
    let mut r = StreamReader::new(src);
    let mut records = 0u64;
    let mut error = None;
    let mut tps = 1_000_000_000u64;
    // Heads only: the arguments are never needed, and skipping them is most of the speed.
    while let Some(rec) = r.next_head() {
        records += 1;
        let rec = match rec {
            Ok(rec) => rec,
            Err(e) => {
                error = Some(e);
                break;
            }
        };
        match rec {
            Head::Initialization { ticks_per_second } => tps = ticks_per_second.max(1),
            Head::KernelObject {
                obj_type: 1,
                koid,
                name,
            } => {
                if name == INFO_PROCESS {
                    b.info_pid = Some(koid);
                }
                b.process_names.insert(koid, name.to_string());
            }
            Head::KernelObject {
                obj_type: 2,
                koid,
                name,
            } => {
                b.thread_names.insert(koid, name.to_string());
            }
            Head::Event(e) => {
                let ns = |t: u64| {
                    if tps == 1_000_000_000 {
                        t
                    } else {
                        (u128::from(t) * 1_000_000_000 / u128::from(tps)) as u64
                    }
                };
                let ts = ns(e.timestamp);
                if Some(e.pid) == b.info_pid {
                    if e.kind == EventKind::Instant {
                        b.markers.push(e.name.to_string());
                    }
                    continue;
                }
                let slice = matches!(
                    e.kind,
                    EventKind::Begin | EventKind::End | EventKind::Complete { .. }
                );
                if !slice {
                    continue;
                }
                b.first_ns = Some(b.first_ns.map_or(ts, |f| f.min(ts)));
                b.last_ns = b.last_ns.max(ts);
                let t = b.thread(e.pid, e.tid);
                {
                    let tree = &mut b.threads[t].tree;
                    tree.first_ns = tree.first_ns.min(ts);
                    tree.last_ns = tree.last_ns.max(ts);
                }
                b.close_completes(t, ts);
                match e.kind {
                    EventKind::Begin => b.open(t, e.name, ts, None),
                    EventKind::End => {
                        if b.threads[t].stack.is_empty() {
                            b.threads[t].tree.unmatched_ends += 1;
                        } else {
                            b.close(t, ts);
                        }
                    }
                    EventKind::Complete { end } => {
                        let end = ns(end).max(ts);
                        b.last_ns = b.last_ns.max(end);
                        let tree = &mut b.threads[t].tree;
                        tree.last_ns = tree.last_ns.max(end);
                        b.open(t, e.name, ts, Some(end));
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    b.finish(records, error)
}
