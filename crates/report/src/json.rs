//! The report for scripts (`--json`): the same figures as the text, every function and
//! thread, full names, times in nanoseconds.

use crate::analyze::{Analysis, Source};
use crate::summary::{self, FuncStats, SortBy};
use serde_json::{json, Value};

fn functions(a: &Analysis, stats: &[FuncStats]) -> Value {
    Value::Array(
        stats
            .iter()
            .map(|s| {
                json!({
                    "name": a.name(s.func),
                    "calls": s.calls,
                    "total_ns": s.total_ns,
                    "self_ns": s.self_ns,
                })
            })
            .collect(),
    )
}

/// The report as one JSON value.
pub fn render(a: &Analysis, trace_name: &str, threads: &[usize], sort: SortBy) -> Value {
    let sel = || threads.iter().map(|&t| &a.threads[t]);
    let thread_values: Vec<Value> = threads
        .iter()
        .map(|&t| {
            let th = &a.threads[t];
            json!({
                "process": a.process_names.get(&th.pid),
                "thread": a.thread_names.get(&th.tid),
                "process_koid": th.pid,
                "thread_koid": th.tid,
                "calls": th.calls(),
                "busy_ns": th.busy_ns(),
                "first_ns": th.first_ns,
                "last_ns": th.last_ns,
                "cut_off_calls": th.cut_off,
                "functions": functions(a, &summary::functions([th], sort)),
            })
        })
        .collect();
    let slowest: Vec<Value> = a
        .slowest
        .iter()
        .filter(|s| threads.contains(&s.thread))
        .map(|s| {
            let th = &a.threads[s.thread];
            let path: Vec<&str> = th.path(s.node).into_iter().map(|f| a.name(f)).collect();
            json!({
                "function": path.last(),
                "stack": path,
                "process": a.process_names.get(&th.pid),
                "thread": a.thread_names.get(&th.tid),
                "start_ns": s.start_ns,
                "at_ns": s.start_ns.saturating_sub(a.first_ns),
                "duration_ns": s.dur_ns,
            })
        })
        .collect();
    let focus = a.focus.map(|f| {
        let stats = summary::functions(sel(), SortBy::Total);
        let s = stats.iter().find(|s| s.func == f);
        let (callers, callees) = summary::callers_and_callees(sel(), f);
        let side = |v: Vec<summary::Neighbour>| -> Vec<Value> {
            v.into_iter()
                .map(|n| {
                    json!({
                        "name": n.func.map(|f| a.name(f)),
                        "calls": n.calls,
                        "total_ns": n.total_ns,
                    })
                })
                .collect()
        };
        let latency = summary::latency(&a.focus_durations).map(|l| {
            let mut p = serde_json::Map::new();
            for (q, v) in &l.percentiles {
                p.insert(format!("p{q}"), json!(v));
            }
            json!({
                "count": l.count,
                "min_ns": l.min_ns,
                "mean_ns": l.mean_ns,
                "max_ns": l.max_ns,
                "percentiles_ns": p,
            })
        });
        json!({
            "name": a.name(f),
            "calls": s.map(|s| s.calls),
            "total_ns": s.map(|s| s.total_ns),
            "self_ns": s.map(|s| s.self_ns),
            "latency": latency,
            "callers": side(callers),
            "callees": side(callees),
        })
    });
    json!({
        "trace": trace_name,
        "source": match a.source {
            Source::Exact => "exact",
            Source::Emulate => "emulate",
            Source::Sampled => "sampled",
        },
        "counts_exact": a.source.exact(),
        "trace_info": a.markers,
        "first_ns": a.first_ns,
        "last_ns": a.last_ns,
        "error": a.error.as_ref().map(|e| e.to_string()),
        "calls": sel().map(|t| t.calls()).sum::<u64>(),
        "all_threads": functions(a, &summary::functions(sel(), sort)),
        "threads": thread_values,
        "slowest": slowest,
        "function": focus,
    })
}
