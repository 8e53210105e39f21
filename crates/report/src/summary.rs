//! What the tables show, computed from the calling-context trees: functions by total
//! and self time, the callers and callees of one function, latency percentiles.

use crate::analyze::{Analysis, FuncId, ThreadTree, NO_NODE};
use rustc_hash::FxHashMap;

/// One function's figures on a thread (or on several, summed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuncStats {
    /// The function.
    pub func: FuncId,
    /// Calls (slices).
    pub calls: u64,
    /// Time from entry to return; a recursive call inside another of the same function
    /// is not counted twice.
    pub total_ns: u64,
    /// Time in the function itself, not in its callees.
    pub self_ns: u64,
}

/// How tables are ordered.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum SortBy {
    /// Total time, largest first.
    #[default]
    Total,
    /// Self time, largest first.
    SelfTime,
    /// Calls, most first.
    Calls,
}

/// Sorts `v` as `by` says (ties: by name order of id, for stable output).
pub fn sort(v: &mut [FuncStats], by: SortBy) {
    v.sort_by(|a, b| {
        let key = |s: &FuncStats| match by {
            SortBy::Total => (s.total_ns, s.self_ns),
            SortBy::SelfTime => (s.self_ns, s.total_ns),
            SortBy::Calls => (s.calls, s.total_ns),
        };
        key(b).cmp(&key(a)).then(a.func.cmp(&b.func))
    });
}

/// Adds `tree`'s functions into `acc`.
fn add_functions(tree: &ThreadTree, acc: &mut FxHashMap<FuncId, FuncStats>) {
    for n in &tree.nodes {
        let s = acc.entry(n.func).or_insert(FuncStats {
            func: n.func,
            calls: 0,
            total_ns: 0,
            self_ns: 0,
        });
        s.calls += n.calls;
        s.self_ns += n.self_ns;
        // Only the outermost activation of a recursive function adds to its total.
        let mut p = n.parent;
        let mut nested = false;
        while p != NO_NODE {
            let pn = &tree.nodes[p as usize];
            if pn.func == n.func {
                nested = true;
                break;
            }
            p = pn.parent;
        }
        if !nested {
            s.total_ns += n.total_ns;
        }
    }
}

/// The functions of the given threads, summed, in `by` order.
pub fn functions<'a>(
    threads: impl IntoIterator<Item = &'a ThreadTree>,
    by: SortBy,
) -> Vec<FuncStats> {
    let mut acc = FxHashMap::default();
    for t in threads {
        add_functions(t, &mut acc);
    }
    let mut v: Vec<FuncStats> = acc.into_values().collect();
    sort(&mut v, by);
    v
}

/// A caller or callee of the function in focus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Neighbour {
    /// The caller or callee; `None` for "called from no function" (a thread's root).
    pub func: Option<FuncId>,
    /// Calls along this edge.
    pub calls: u64,
    /// Time of those calls (the focus function's for callers, the callee's for callees).
    pub total_ns: u64,
}

/// Who calls `f`, and what `f` calls, over the given threads; most time first.
pub fn callers_and_callees<'a>(
    threads: impl IntoIterator<Item = &'a ThreadTree>,
    f: FuncId,
) -> (Vec<Neighbour>, Vec<Neighbour>) {
    let mut callers: FxHashMap<Option<FuncId>, Neighbour> = FxHashMap::default();
    let mut callees: FxHashMap<Option<FuncId>, Neighbour> = FxHashMap::default();
    for t in threads {
        for n in &t.nodes {
            let parent = (n.parent != NO_NODE).then(|| t.nodes[n.parent as usize].func);
            if n.func == f {
                let e = callers.entry(parent).or_insert(Neighbour {
                    func: parent,
                    calls: 0,
                    total_ns: 0,
                });
                e.calls += n.calls;
                e.total_ns += n.total_ns;
            }
            if parent == Some(f) {
                let e = callees.entry(Some(n.func)).or_insert(Neighbour {
                    func: Some(n.func),
                    calls: 0,
                    total_ns: 0,
                });
                e.calls += n.calls;
                e.total_ns += n.total_ns;
            }
        }
    }
    let order = |v: FxHashMap<Option<FuncId>, Neighbour>| {
        let mut v: Vec<Neighbour> = v.into_values().collect();
        v.sort_by(|a, b| {
            b.total_ns
                .cmp(&a.total_ns)
                .then(b.calls.cmp(&a.calls))
                .then(a.func.cmp(&b.func))
        });
        v
    };
    (order(callers), order(callees))
}

/// Latency figures of one function's calls.
#[derive(Clone, Debug, PartialEq)]
pub struct Latency {
    /// Calls measured.
    pub count: u64,
    /// Shortest call.
    pub min_ns: u64,
    /// Mean duration (rounded down).
    pub mean_ns: u64,
    /// (percentile, duration): 50, 90, 99, 99.9.
    pub percentiles: Vec<(f64, u64)>,
    /// Longest call.
    pub max_ns: u64,
}

/// The percentiles reported.
pub const PERCENTILES: [f64; 4] = [50.0, 90.0, 99.0, 99.9];

/// Latency of `sorted` durations (nearest-rank percentiles); `None` if there are none.
pub fn latency(sorted: &[u64]) -> Option<Latency> {
    let (&min_ns, &max_ns) = (sorted.first()?, sorted.last()?);
    let n = sorted.len();
    let sum: u128 = sorted.iter().map(|&d| u128::from(d)).sum();
    let percentiles = PERCENTILES
        .iter()
        .map(|&p| {
            // Nearest rank: the smallest value with at least p % of the calls at or below it.
            let rank = ((p / 100.0) * n as f64).ceil().max(1.0) as usize;
            (p, sorted[rank.min(n) - 1])
        })
        .collect();
    Some(Latency {
        count: n as u64,
        min_ns,
        mean_ns: (sum / n as u128) as u64,
        percentiles,
        max_ns,
    })
}

/// The indexes of the threads `sel` picks: a number is a thread or process id (as the
/// trace names them, `[tid=N]`/`[pid=N]`) or koid, anything else a part of the
/// "process / thread" label. `None` picks all.
pub fn select_threads(a: &Analysis, sel: Option<&str>) -> Vec<usize> {
    let all = 0..a.threads.len();
    let Some(sel) = sel else {
        return all.collect();
    };
    let lower = sel.to_lowercase();
    all.filter(|&t| {
        let label = a.thread_label(t);
        if sel.chars().all(|c| c.is_ascii_digit()) {
            label.contains(&format!("tid={sel}]"))
                || label.contains(&format!("pid={sel}]"))
                || a.threads[t].tid.to_string() == sel
        } else {
            label.to_lowercase().contains(&lower)
        }
    })
    .collect()
}
