//! The terminal report: tables that fit 80 columns, names shortened to fit.

use crate::analyze::{Analysis, FuncId, Source};
use crate::summary::{self, FuncStats, Latency, Neighbour, SortBy};
use std::fmt::Write as _;

/// Width of the whole report.
pub const WIDTH: usize = 80;

/// What the text report shows.
#[derive(Clone, Debug)]
pub struct TextOptions {
    /// Functions per table.
    pub top: usize,
    /// Thread tables shown (busiest first).
    pub max_threads: usize,
    /// Table order.
    pub sort: SortBy,
}

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions {
            top: 20,
            max_threads: 10,
            sort: SortBy::Total,
        }
    }
}

/// `ns` with three significant digits and a unit: `850 ns`, `12.3 µs`, `4.21 ms`, `1.50 s`.
pub fn duration(ns: u64) -> String {
    if ns < 1000 {
        return format!("{ns} ns");
    }
    let (v, unit) = if ns < 1_000_000 {
        (ns as f64 / 1e3, "µs")
    } else if ns < 1_000_000_000 {
        (ns as f64 / 1e6, "ms")
    } else {
        (ns as f64 / 1e9, "s")
    };
    // Rounding may carry into the next digit (999.7 → "1000"); that is still 4 chars.
    if v >= 100.0 {
        format!("{v:.0} {unit}")
    } else if v >= 10.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.2} {unit}")
    }
}

/// `n` with thousands separators.
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Seconds from the trace's start, to the nanosecond (as Perfetto's timeline counts).
pub fn at(ns: u64, first_ns: u64) -> String {
    let d = ns.saturating_sub(first_ns);
    format!("{}.{:09}", d / 1_000_000_000, d % 1_000_000_000)
}

/// Collapses every top-level `<…>` (generic and template arguments) and `(…)`
/// (parameter lists) of `name` into `<…>` and `(…)`.
fn collapse_brackets(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut depth = 0usize;
    let mut open = ' ';
    for c in name.chars() {
        match c {
            '<' | '(' if depth == 0 => {
                open = c;
                depth = 1;
                out.push(c);
                out.push('…');
            }
            '<' | '(' => depth += 1,
            '>' | ')' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    out.push(if open == '<' { '>' } else { ')' });
                }
            }
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// A Rust trait method's `<Type as Trait>` head, shortened to the last path segment of
/// each (`<alloc::vec::Vec<T> as core::ops::drop::Drop>::drop` →
/// (`<Vec<…> as Drop>`, `::drop`)): the head says whose method it is, so it is kept.
fn qualified_self(name: &str) -> Option<(String, &str)> {
    if !name.starts_with('<') {
        return None;
    }
    let mut depth = 0usize;
    let end = name.char_indices().find_map(|(i, c)| {
        match c {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        None
    })?;
    let last_segment = |p: &str| {
        let p = collapse_brackets(p.trim());
        // The last `::` outside brackets (collapsed ones hold none).
        match p.rfind("::") {
            Some(i) => p[i + 2..].to_string(),
            None => p,
        }
    };
    let inner = &name[1..end];
    let head = match inner.split_once(" as ") {
        Some((ty, tr)) => format!("<{} as {}>", last_segment(ty), last_segment(tr)),
        None => format!("<{}>", last_segment(inner)),
    };
    Some((head, &name[end + 1..]))
}

/// `name` in at most `width` characters: generic arguments and parameter lists
/// collapsed, then leading path segments dropped (`…::HashMap<…>::insert`), then the
/// middle cut out. Names that fit are left whole.
pub fn shorten(name: &str, width: usize) -> String {
    let len = |s: &str| s.chars().count();
    if len(name) <= width {
        return name.to_string();
    }
    let mut s = match qualified_self(name) {
        Some((head, rest)) => format!("{head}{}", collapse_brackets(rest)),
        None => collapse_brackets(name),
    };
    if len(&s) > width {
        let sep = if s.contains("::") { "::" } else { "." };
        let parts: Vec<&str> = s.split(sep).collect();
        if parts.len() > 1 {
            // Keep as many trailing segments as fit after "…::".
            let mut kept = parts[parts.len() - 1].to_string();
            for p in parts[..parts.len() - 1].iter().rev() {
                let candidate = format!("{p}{sep}{kept}");
                if len(&candidate) + 1 + sep.len() > width {
                    break;
                }
                kept = candidate;
            }
            s = format!("…{sep}{kept}");
        }
    }
    if len(&s) > width {
        let chars: Vec<char> = s.chars().collect();
        let keep = width.saturating_sub(1);
        let head = keep / 2;
        let tail = keep - head;
        s = chars[..head]
            .iter()
            .chain(std::iter::once(&'…'))
            .chain(&chars[chars.len() - tail..])
            .collect();
    }
    s
}

/// The function table's header line.
fn table_header(out: &mut String) {
    let _ = writeln!(
        out,
        "{:>9}  {:>9}  {:>12}  function",
        "total", "self", "calls"
    );
}

/// A call count, marked `~` when the trace's counts are estimates.
pub fn calls(a: &Analysis, n: u64) -> String {
    if a.source.exact() {
        count(n)
    } else {
        format!("~{}", count(n))
    }
}

/// One function row.
fn row(out: &mut String, a: &Analysis, s: &FuncStats) {
    let name_width = WIDTH - (9 + 2 + 9 + 2 + 12 + 2);
    let calls = calls(a, s.calls);
    let _ = writeln!(
        out,
        "{:>9}  {:>9}  {:>12}  {}",
        duration(s.total_ns),
        duration(s.self_ns),
        calls,
        shorten(a.name(s.func), name_width)
    );
}

fn table(out: &mut String, a: &Analysis, stats: &[FuncStats], top: usize) {
    table_header(out);
    for s in stats.iter().take(top) {
        row(out, a, s);
    }
    if stats.len() > top {
        let _ = writeln!(
            out,
            "{:>36}… {} more functions (--top N shows more)",
            "",
            count((stats.len() - top) as u64)
        );
    }
}

/// A line under 80 columns: `text` shortened in the middle if needed.
fn fit(text: &str) -> String {
    shorten(text, WIDTH)
}

/// What the trace says about how it was recorded, in one or two lines.
pub fn source_line(a: &Analysis) -> &'static str {
    match a.source {
        Source::Exact => "every call and return was traced: counts and times are exact",
        Source::Emulate => {
            "every call and return was traced (emulated): counts are exact, times follow \
             the trace's clock"
        }
        Source::Sampled => {
            "sampled call stacks: a call is a run of samples in one frame, so counts (~) \
             and times are estimates"
        }
    }
}

/// Wraps `text` at spaces to `width` columns, each line after the first indented by
/// `indent` spaces.
fn wrap(text: &str, width: usize, indent: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for w in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + w.chars().count() > width {
            out.push_str(&line);
            out.push('\n');
            line = " ".repeat(indent);
        } else if !line.is_empty() && !line.trim().is_empty() {
            line.push(' ');
        }
        line.push_str(w);
    }
    out.push_str(&line);
    out
}

/// The report as text: header, all-threads table, per-thread tables, slowest calls,
/// and the function in focus.
pub fn render(a: &Analysis, trace_name: &str, threads: &[usize], o: &TextOptions) -> String {
    let mut out = String::new();
    let calls: u64 = threads.iter().map(|&t| a.threads[t].calls()).sum();
    let pids: std::collections::BTreeSet<u64> = threads.iter().map(|&t| a.threads[t].pid).collect();
    let _ = writeln!(out, "{}", fit(&format!("ptscope report: {trace_name}")));
    let _ = writeln!(out, "  {}", wrap(source_line(a), WIDTH - 2, 2));
    let _ = writeln!(
        out,
        "  {} {} in {} process{}, {} thread{}, over {}",
        count(calls),
        if calls == 1 { "call" } else { "calls" },
        pids.len(),
        if pids.len() == 1 { "" } else { "es" },
        threads.len(),
        if threads.len() == 1 { "" } else { "s" },
        duration(a.last_ns.saturating_sub(a.first_ns))
    );
    // The sampling marker is what the line above says already.
    let sampled = ptscope_output::SAMPLED_MARKER
        .split(':')
        .next()
        .unwrap_or_default();
    for m in a.markers.iter().filter(|m| !m.starts_with(sampled)) {
        let _ = writeln!(out, "  {}", wrap(&format!("trace info: {m}"), WIDTH - 2, 4));
    }
    if let Some(e) = &a.error {
        let _ = writeln!(
            out,
            "  {}",
            wrap(
                &format!(
                    "warning: the trace is damaged or cut short ({e}); this covers what came before"
                ),
                WIDTH - 2,
                4
            )
        );
    }
    let cut: u64 = threads.iter().map(|&t| a.threads[t].cut_off).sum();
    if cut > 0 {
        let _ = writeln!(
            out,
            "  {}",
            wrap(
                &format!(
                    "{} call{} still running when the trace ended: counted up to its end",
                    count(cut),
                    if cut == 1 { " was" } else { "s were" }
                ),
                WIDTH - 2,
                4
            )
        );
    }
    if threads.len() > 1 {
        let stats = summary::functions(threads.iter().map(|&t| &a.threads[t]), o.sort);
        let _ = writeln!(
            out,
            "\nAll threads: {} functions",
            count(stats.len() as u64)
        );
        table(&mut out, a, &stats, o.top);
    }
    let mut by_busy: Vec<usize> = threads.to_vec();
    by_busy.sort_by_key(|&t| std::cmp::Reverse(a.threads[t].busy_ns()));
    for &t in by_busy.iter().take(o.max_threads) {
        let th = &a.threads[t];
        let stats = summary::functions([th], o.sort);
        let _ = writeln!(out);
        let _ = writeln!(out, "{}", fit(&a.thread_label(t)));
        let _ = writeln!(
            out,
            "  {} calls, {} in its outermost calls, {} functions",
            count(th.calls()),
            duration(th.busy_ns()),
            count(stats.len() as u64)
        );
        table(&mut out, a, &stats, o.top);
    }
    if by_busy.len() > o.max_threads {
        let _ = writeln!(
            out,
            "\n… {} more threads (--thread NAME|TID shows one; --json has them all)",
            by_busy.len() - o.max_threads
        );
    }
    slowest(&mut out, a, threads);
    if let Some(f) = a.focus {
        focus(&mut out, a, threads, f);
    }
    out
}

fn slowest(out: &mut String, a: &Analysis, threads: &[usize]) {
    let calls: Vec<_> = a
        .slowest
        .iter()
        .filter(|s| threads.contains(&s.thread))
        .collect();
    if calls.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nSlowest calls (at: seconds from the trace's start, as Perfetto's timeline shows)"
    );
    let _ = writeln!(out, "{:>9}  {:>14}  function", "duration", "at");
    for s in calls {
        let th = &a.threads[s.thread];
        let path = th.path(s.node);
        let Some(&f) = path.last() else { continue };
        let _ = writeln!(
            out,
            "{:>9}  {:>14}  {}",
            duration(s.dur_ns),
            at(s.start_ns, a.first_ns),
            shorten(a.name(f), WIDTH - 9 - 2 - 14 - 2)
        );
        // Where it was: the thread, then as many of the callers as fit, innermost last.
        let width = WIDTH - 27;
        let mut trail = shorten(&a.thread_label(s.thread), width.min(36));
        let callers = &path[..path.len() - 1];
        if !callers.is_empty() {
            let room = width.saturating_sub(trail.chars().count() + 2);
            let mut kept: Vec<String> = Vec::new();
            let mut used = 0;
            for &c in callers.iter().rev() {
                // The innermost caller is always shown, shortened to the room left.
                let n = if kept.is_empty() {
                    shorten(a.name(c), 24.min(room.saturating_sub(4).max(8)))
                } else {
                    shorten(a.name(c), 24)
                };
                if kept.is_empty() {
                    used += n.chars().count();
                    kept.push(n);
                    continue;
                }
                let need = n.chars().count() + if kept.is_empty() { 0 } else { 3 };
                // Leave room for the "… > " that says callers were left out.
                if used + need + 4 > room && kept.len() < callers.len() {
                    break;
                }
                used += need;
                kept.push(n);
            }
            let mut chain = String::new();
            if kept.len() < callers.len() {
                chain.push_str("… > ");
            }
            kept.reverse();
            chain.push_str(&kept.join(" > "));
            trail.push_str(": ");
            trail.push_str(&chain);
        }
        let _ = writeln!(out, "{:>27}{}", "", shorten(&trail, width));
    }
}

fn latency_line(l: &Latency) -> String {
    let mut s = format!("min {}", duration(l.min_ns));
    for (p, v) in &l.percentiles {
        let _ = write!(s, "  p{p} {}", duration(*v));
    }
    let _ = write!(
        s,
        "  max {}  mean {}",
        duration(l.max_ns),
        duration(l.mean_ns)
    );
    s
}

fn neighbours(out: &mut String, a: &Analysis, title: &str, v: &[Neighbour]) {
    let name_width = WIDTH - 4 - 2 - 12 - 2 - 9;
    let _ = writeln!(
        out,
        "  {:<w$}  {:>12}  {:>9}",
        title,
        "calls",
        "total",
        w = name_width + 2
    );
    if v.is_empty() {
        let _ = writeln!(out, "    (none)");
    }
    for n in v {
        let name = match n.func {
            Some(f) => shorten(a.name(f), name_width),
            None => "(thread root: called from no traced function)".into(),
        };
        let _ = writeln!(
            out,
            "    {:<w$}  {:>12}  {:>9}",
            name,
            calls(a, n.calls),
            duration(n.total_ns),
            w = name_width
        );
    }
}

fn focus(out: &mut String, a: &Analysis, threads: &[usize], f: FuncId) {
    let sel = || threads.iter().map(|&t| &a.threads[t]);
    let stats = summary::functions(sel(), SortBy::Total);
    let Some(s) = stats.iter().find(|s| s.func == f) else {
        let _ = writeln!(out, "\n{}: not called on the threads shown", a.name(f));
        return;
    };
    let _ = writeln!(out, "\n{}", fit(&format!("Function {}", a.name(f))));
    let _ = writeln!(
        out,
        "  {} calls, total {}, self {}",
        calls(a, s.calls),
        duration(s.total_ns),
        duration(s.self_ns)
    );
    if let Some(l) = summary::latency(&a.focus_durations) {
        let _ = writeln!(
            out,
            "  {}",
            wrap(
                &format!("latency (all threads): {}", latency_line(&l)),
                WIDTH - 2,
                4
            )
        );
    }
    let (callers, callees) = summary::callers_and_callees(sel(), f);
    neighbours(out, a, "called by", &callers);
    neighbours(out, a, "calls", &callees);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_have_three_significant_digits() {
        assert_eq!(duration(0), "0 ns");
        assert_eq!(duration(999), "999 ns");
        assert_eq!(duration(1_000), "1.00 µs");
        assert_eq!(duration(12_345), "12.3 µs");
        assert_eq!(duration(4_210_000), "4.21 ms");
        assert_eq!(duration(123_456_789), "123 ms");
        assert_eq!(duration(1_500_000_000), "1.50 s");
        assert!(duration(u64::MAX).chars().count() <= 20);
    }

    #[test]
    fn counts_and_times_read_as_people_write_them() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(10_000_000), "10,000,000");
        assert_eq!(at(1_004_123_456, 0), "1.004123456");
        assert_eq!(at(5, 10), "0.000000000");
    }

    #[test]
    fn long_names_are_shortened_sensibly() {
        assert_eq!(shorten("main", 10), "main");
        let rust = "std::collections::hash::map::HashMap<alloc::string::String, u64>::insert";
        let s = shorten(rust, 40);
        assert_eq!(s, "…::hash::map::HashMap<…>::insert");
        let cpp = "void std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>(__gnu_cxx::__normal_iterator<int*>, int const&)";
        let s = shorten(cpp, 44);
        assert!(s.chars().count() <= 44, "{s}");
        assert!(s.ends_with("_M_realloc_insert<…>(…)"), "{s}");
        let r#impl = "<alloc::vec::Vec<T, A> as core::ops::drop::Drop>::drop";
        assert_eq!(shorten(r#impl, 30), "<Vec<…> as Drop>::drop");
        let plain = "a_function_name_with_no_separators_that_goes_on_and_on";
        let s = shorten(plain, 20);
        assert_eq!(s.chars().count(), 20);
        assert!(s.starts_with("a_functio") && s.ends_with("_and_on"), "{s}");
        for w in 1..30 {
            assert!(shorten(rust, w).chars().count() <= w, "{w}");
        }
    }
}
