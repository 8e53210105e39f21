//! Making a trace the UI can open: a time window, a depth limit, and dropping slices
//! shorter than a duration, for every backend (a [`TraceSink`] in front of the output).
//!
//! An exact trace of a few seconds holds tens of millions of calls, more than the
//! Perfetto UI loads. What is left out never vanishes silently: a slice whose children
//! were dropped (too short, or too deep) says how many calls it hid and how long they
//! took, as the arguments `hidden_calls` and `hidden_ns` of its end, and [`FilterStats`]
//! counts everything for the summary.
//!
//! ```
//! use ptscope_output::filter::{FilterSink, OutputFilter};
//! use ptscope_stacks::transcript::TranscriptSink;
//! use ptscope_stacks::TraceSink;
//!
//! let f = OutputFilter { min_duration: 1_000, ..OutputFilter::default() };
//! let mut sink = FilterSink::new(TranscriptSink::default(), f);
//! let t = sink.allocate_thread(0, "main");
//! sink.duration_begin(t, "main", 0, &[]);
//! for i in 0..3 {
//!     sink.duration_begin(t, "tiny", 10 + 100 * i, &[]); // 50 ns each: hidden
//!     sink.duration_end(t, "tiny", 60 + 100 * i, &[]);
//! }
//! sink.duration_begin(t, "long", 500, &[]);
//! sink.duration_end(t, "long", 2_500, &[]);
//! sink.duration_end(t, "main", 3_000, &[]);
//! assert_eq!(sink.stats().hidden_calls, 3);
//! assert_eq!(
//!     sink.into_inner().render(),
//!     "->      0ns BEGIN main\n->    500ns BEGIN long\n->    2.5us END   long\n->      3us END   main\n"
//! );
//! ```

use ptscope_stacks::{Arg, ArgValue, TraceSink};
use std::collections::HashMap;
use std::hash::Hash;

/// What to keep of a trace.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputFilter {
    /// Keep only `[start, end)` (trace ns; `None`: unbounded): slices across its edges
    /// are cut there.
    pub window: Option<(Option<u64>, Option<u64>)>,
    /// Keep slices at most this deep (1: the threads' roots only).
    pub max_depth: Option<usize>,
    /// Drop slices shorter than this (ns), with everything under them.
    pub min_duration: u64,
}

impl OutputFilter {
    /// True when the filter keeps everything.
    pub fn is_none(&self) -> bool {
        self.window.is_none() && self.max_depth.is_none() && self.min_duration == 0
    }
}

/// What a [`FilterSink`] left out.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct FilterStats {
    /// Slices written.
    pub kept: u64,
    /// Slices dropped because they were shorter than the minimum duration (each
    /// counted on the parent shown).
    pub hidden_calls: u64,
    /// Slices dropped because they were deeper than the limit.
    pub too_deep: u64,
    /// Slices entirely outside the window.
    pub outside: u64,
}

impl std::ops::AddAssign for FilterStats {
    /// Adds another sink's counts (threads filtered apart, one summary).
    fn add_assign(&mut self, o: FilterStats) {
        self.kept += o.kept;
        self.hidden_calls += o.hidden_calls;
        self.too_deep += o.too_deep;
        self.outside += o.outside;
    }
}

/// An open slice of a thread, written or not yet.
struct Open {
    name: String,
    start: i64,
    written: bool,
    /// Calls hidden under it, and the time its hidden direct children took.
    hidden_calls: u64,
    hidden_ns: u64,
}

/// One thread's open slices.
#[derive(Default)]
struct Track {
    stack: Vec<Open>,
    /// Entries of `stack` in use (those past it keep their names' memory).
    depth: usize,
    /// The window's end was passed: everything written is closed.
    done: bool,
}

/// A [`TraceSink`] that passes on only what [`OutputFilter`] keeps.
pub struct FilterSink<S: TraceSink> {
    inner: S,
    filter: OutputFilter,
    tracks: HashMap<S::Thread, Track>,
    stats: FilterStats,
}

impl<S: TraceSink> FilterSink<S>
where
    S::Thread: Hash + Eq,
{
    /// Filters what goes into `inner`.
    pub fn new(inner: S, filter: OutputFilter) -> Self {
        FilterSink {
            inner,
            filter,
            tracks: HashMap::new(),
            stats: FilterStats::default(),
        }
    }

    /// What was left out so far.
    pub fn stats(&self) -> FilterStats {
        self.stats
    }

    /// The sink behind (to finish it).
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The sink behind.
    pub fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    fn window_start(&self) -> i64 {
        self.filter
            .window
            .and_then(|w| w.0)
            .map_or(i64::MIN, |t| i64::try_from(t).unwrap_or(i64::MAX))
    }

    fn window_end(&self) -> i64 {
        self.filter
            .window
            .and_then(|w| w.1)
            .map_or(i64::MAX, |t| i64::try_from(t).unwrap_or(i64::MAX))
    }

    /// Writes the begins of `thread`'s open slices that qualify by `now` (old enough,
    /// shallow enough, inside the window), outermost first.
    fn settle(&mut self, thread: S::Thread, now: i64) {
        let (w0, min) = (self.window_start(), self.filter.min_duration as i64);
        let max_depth = self.filter.max_depth.unwrap_or(usize::MAX);
        let Some(t) = self.tracks.get_mut(&thread) else {
            return;
        };
        if now < w0 {
            return;
        }
        for (d, o) in t.stack[..t.depth].iter_mut().enumerate() {
            if o.written {
                continue;
            }
            if d >= max_depth || now.saturating_sub(o.start) < min {
                // Deeper ones are younger still.
                break;
            }
            self.inner
                .duration_begin(thread, &o.name, o.start.max(w0), &[]);
            o.written = true;
            self.stats.kept += 1;
        }
    }

    /// Closes everything written on `thread` at the window's end; nothing more is written.
    fn close_at_window_end(&mut self, thread: S::Thread) {
        let w1 = self.window_end();
        self.settle(thread, w1);
        let Some(t) = self.tracks.get_mut(&thread) else {
            return;
        };
        t.done = true;
        for o in t.stack[..t.depth].iter().rev() {
            if o.written {
                self.inner.duration_end(thread, &o.name, w1, &[]);
            }
        }
        t.depth = 0;
    }

    fn begin(&mut self, thread: S::Thread, name: &str, time: i64) {
        if time >= self.window_end() {
            self.close_at_window_end(thread);
        }
        let t = self.tracks.entry(thread).or_default();
        if t.done {
            return;
        }
        if t.depth == t.stack.len() {
            t.stack.push(Open {
                name: String::new(),
                start: 0,
                written: false,
                hidden_calls: 0,
                hidden_ns: 0,
            });
        }
        let o = &mut t.stack[t.depth];
        o.name.clear();
        o.name.push_str(name);
        o.start = time;
        o.written = false;
        o.hidden_calls = 0;
        o.hidden_ns = 0;
        t.depth += 1;
        self.settle(thread, time);
    }

    fn end(&mut self, thread: S::Thread, time: i64, args: &[Arg<'_>]) {
        if time > self.window_end() {
            self.close_at_window_end(thread);
        }
        let (w0, min) = (self.window_start(), self.filter.min_duration as i64);
        let max_depth = self.filter.max_depth.unwrap_or(usize::MAX);
        let Some(t) = self.tracks.get_mut(&thread) else {
            return;
        };
        if t.done || t.depth == 0 {
            return;
        }
        let d = t.depth - 1;
        let dur = time.saturating_sub(t.stack[d].start);
        let qualifies = d < max_depth && dur >= min && time >= w0;
        if !t.stack[d].written && qualifies {
            // Old enough only now: its ancestors (older) first, then itself.
            self.settle(thread, time);
        }
        let Some(t) = self.tracks.get_mut(&thread) else {
            return;
        };
        t.depth -= 1;
        let o = &t.stack[d];
        if o.written {
            let (calls, ns) = (o.hidden_calls, o.hidden_ns);
            if calls > 0 {
                let mut all: Vec<Arg<'_>> = args.to_vec();
                all.push(Arg::new("hidden_calls", ArgValue::Int(calls as i64)));
                all.push(Arg::new("hidden_ns", ArgValue::Int(ns as i64)));
                self.inner.duration_end(thread, &o.name, time, &all);
            } else {
                self.inner.duration_end(thread, &o.name, time, args);
            }
            return;
        }
        // Left out: counted on its parent, with what it hid.
        let hidden = 1 + o.hidden_calls;
        if time < w0 {
            self.stats.outside += 1;
        } else if d >= max_depth {
            self.stats.too_deep += 1;
        } else {
            self.stats.hidden_calls += 1;
        }
        if time >= w0 {
            if let Some(p) = d.checked_sub(1).and_then(|p| t.stack.get_mut(p)) {
                p.hidden_calls += hidden;
                p.hidden_ns += dur.max(0) as u64;
            }
        }
    }
}

impl<S: TraceSink> TraceSink for FilterSink<S>
where
    S::Thread: Hash + Eq,
{
    type Thread = S::Thread;

    fn allocate_pid(&mut self, name: &str) -> u32 {
        self.inner.allocate_pid(name)
    }
    fn allocate_thread(&mut self, pid: u32, name: &str) -> Self::Thread {
        self.inner.allocate_thread(pid, name)
    }
    fn rename_pid(&mut self, pid: u32, name: &str) {
        self.inner.rename_pid(pid, name)
    }
    fn rename_thread(&mut self, thread: Self::Thread, name: &str) {
        self.inner.rename_thread(thread, name)
    }
    fn duration_begin(&mut self, thread: Self::Thread, name: &str, time: i64, _args: &[Arg<'_>]) {
        self.begin(thread, name, time);
    }
    fn duration_end(&mut self, thread: Self::Thread, _name: &str, time: i64, args: &[Arg<'_>]) {
        self.end(thread, time, args);
    }
    fn duration_complete(
        &mut self,
        thread: Self::Thread,
        name: &str,
        start: i64,
        end: i64,
        args: &[Arg<'_>],
    ) {
        let depth = self.tracks.get(&thread).map_or(0, |t| t.depth);
        let (w0, w1) = (self.window_start(), self.window_end());
        if end < w0 || start >= w1 {
            self.stats.outside += 1;
            return;
        }
        if depth >= self.filter.max_depth.unwrap_or(usize::MAX)
            || end.saturating_sub(start) < self.filter.min_duration as i64
        {
            self.stats.hidden_calls += 1;
            return;
        }
        self.settle(thread, end);
        self.stats.kept += 1;
        self.inner
            .duration_complete(thread, name, start.max(w0), end.min(w1), args);
    }
    fn duration_instant(&mut self, thread: Self::Thread, name: &str, time: i64, args: &[Arg<'_>]) {
        if time >= self.window_start() && time < self.window_end() {
            self.inner.duration_instant(thread, name, time, args);
        }
    }
    fn counter(&mut self, thread: Self::Thread, name: &str, time: i64, args: &[Arg<'_>]) {
        if time >= self.window_start() && time < self.window_end() {
            self.inner.counter(thread, name, time, args);
        }
    }
    fn duration_begin_deferred(
        &mut self,
        thread: Self::Thread,
        name: &str,
        time: i64,
        args: &[Arg<'_>],
    ) {
        // A frame learnt late (open since before what was written): kept as it comes.
        self.inner.duration_begin_deferred(thread, name, time, args)
    }
    fn duration_complete_deferred(
        &mut self,
        thread: Self::Thread,
        name: &str,
        start: i64,
        end: i64,
        args: &[Arg<'_>],
    ) {
        self.inner
            .duration_complete_deferred(thread, name, start, end, args)
    }
    fn end_of_input(&mut self) {
        let threads: Vec<S::Thread> = self.tracks.keys().copied().collect();
        if self.filter.window.is_some_and(|w| w.1.is_some()) {
            for t in threads {
                self.close_at_window_end(t);
            }
        }
        self.inner.end_of_input()
    }
    fn warning(&mut self, message: &str) {
        self.inner.warning(message)
    }
}

/// Parses a duration: a number with a unit `s`, `ms`, `us` (or `µs`) or `ns`, e.g.
/// `1.5s`, `250ms`, `1us`; a bare number is nanoseconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let scale: f64 = match unit.trim() {
        "" | "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        other => {
            return Err(format!(
                "`{s}`: unknown unit `{other}` (use s, ms, us or ns, e.g. 1.5s, 250ms, 1us)"
            ))
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (e.g. 1.5s, 250ms, 1us)"))?;
    Ok((v * scale).round() as u64)
}

/// Parses a `--window START..END` (either end may be left out: `2s..`, `..500ms`).
pub fn parse_window(s: &str) -> Result<(Option<u64>, Option<u64>), String> {
    let Some((a, b)) = s.split_once("..") else {
        return Err(format!(
            "--window {s}: expected START..END, times from the trace's start (e.g. 1.5s..2s, \
             ..500ms, 2s..)"
        ));
    };
    let end = |x: &str| -> Result<Option<u64>, String> {
        if x.trim().is_empty() {
            Ok(None)
        } else {
            parse_duration(x).map(Some)
        }
    };
    let (a, b) = (end(a)?, end(b)?);
    if let (Some(x), Some(y)) = (a, b) {
        if y <= x {
            return Err(format!("--window {s}: the end is not after the start"));
        }
    }
    Ok((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptscope_stacks::transcript::TranscriptSink;

    fn run(f: OutputFilter, ops: &[(i64, Option<&str>)]) -> (String, FilterStats) {
        let mut s = FilterSink::new(TranscriptSink::default(), f);
        let t = s.allocate_thread(0, "t");
        for &(time, name) in ops {
            match name {
                Some(n) => s.duration_begin(t, n, time, &[]),
                None => s.duration_end(t, "", time, &[]),
            }
        }
        s.end_of_input();
        let st = s.stats();
        (s.into_inner().render(), st)
    }

    #[test]
    fn a_window_cuts_slices_at_its_edges() {
        let f = OutputFilter {
            window: Some((Some(100), Some(200))),
            ..OutputFilter::default()
        };
        let (t, st) = run(
            f,
            &[
                (0, Some("main")),
                (10, Some("early")),
                (20, None),
                (150, Some("mid")),
                (160, None),
                (190, Some("late")),
                (300, None),
                (400, None),
            ],
        );
        assert_eq!(
            t,
            "->    100ns BEGIN main\n->    150ns BEGIN mid\n->    160ns END   mid\n\
             ->    190ns BEGIN late\n->    200ns END   late\n->    200ns END   main\n\
             INPUT TRACE STREAM ENDED, any lines printed below this were deferred\n"
        );
        assert_eq!(st.outside, 1);
    }

    #[test]
    fn too_deep_slices_are_counted_on_the_deepest_kept() {
        let f = OutputFilter {
            max_depth: Some(1),
            ..OutputFilter::default()
        };
        let (t, st) = run(
            f,
            &[
                (0, Some("main")),
                (1, Some("a")),
                (2, Some("b")),
                (3, None),
                (4, None),
                (5, None),
            ],
        );
        assert!(
            t.starts_with("->      0ns BEGIN main\n->      5ns END   main\n"),
            "{t}"
        );
        assert_eq!(st.too_deep, 2);
    }

    #[test]
    fn durations_and_windows_parse() {
        assert_eq!(parse_duration("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration("1us"), Ok(1_000));
        assert_eq!(parse_duration("250 ms"), Ok(250_000_000));
        assert_eq!(parse_duration("7"), Ok(7));
        assert!(parse_duration("3 weeks").is_err());
        assert_eq!(
            parse_window("1s..2s"),
            Ok((Some(1_000_000_000), Some(2_000_000_000)))
        );
        assert_eq!(parse_window("..5ms"), Ok((None, Some(5_000_000))));
        assert!(parse_window("2s..1s").is_err());
        assert!(parse_window("2s").is_err());
    }
}
