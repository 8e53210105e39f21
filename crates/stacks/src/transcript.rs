//! The magic-trace test transcript: a plain-text rendering of what a stack writer emits.
//!
//! magic-trace's test suite prints every slice a writer produces as `-> %8s BEGIN name`
//! / `-> %8s END   name` lines; its fixtures (`expected.txt`) are the oracle ptscope's
//! writers are checked against byte for byte. This sink produces exactly that form.
//!
//! ```
//! use ptscope_stacks::transcript::{format_span, TranscriptSink};
//! use ptscope_stacks::TraceSink;
//!
//! assert_eq!(format_span(2_253), "2.253us");
//! assert_eq!(format_span(11_450), "11.45us");
//! let mut t = TranscriptSink::default();
//! let th = t.allocate_thread(1, "main");
//! t.duration_begin(th, "main", 436, &[]);
//! t.end_of_input();
//! t.duration_end(th, "main", 105_943, &[]);
//! assert_eq!(
//!     t.render(),
//!     "->    436ns BEGIN main\nINPUT TRACE STREAM ENDED, any lines printed below this were deferred\n-> 105.943us END   main\n"
//! );
//! ```

use crate::sink::{Arg, TraceSink};
use std::fmt::Write as _;

/// Names of slices the transcript leaves out (extra-event tracks), as magic-trace's tests do.
const HIDDEN: &[&str] = &["branch-misses", "cache-misses"];

/// Collects transcript lines; warnings are kept apart because they print first.
#[derive(Default, Debug, Clone)]
pub struct TranscriptSink {
    /// Warning lines, in the order they were reported.
    pub warnings: Vec<String>,
    /// Slice lines, including the end-of-input marker.
    pub lines: Vec<String>,
    next_id: u32,
}

/// The marker magic-trace prints between streaming output and what `finalize` writes.
pub const END_OF_INPUT: &str =
    "INPUT TRACE STREAM ENDED, any lines printed below this were deferred";

impl TranscriptSink {
    /// The whole transcript: warnings first, then the lines.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for l in self.warnings.iter().chain(self.lines.iter()) {
            out.push_str(l);
            out.push('\n');
        }
        out
    }

    fn line(&mut self, time: Option<i64>, what: &str, name: &str) {
        let t = time.map(format_span).unwrap_or_default();
        let mut l = String::with_capacity(name.len() + 20);
        let _ = write!(l, "-> {t:>8} {what} {name}");
        self.lines.push(l);
    }
}

/// Formats a nanosecond span like Core's `Time_ns.Span.to_string_hum`.
///
/// The largest unit (ns, us, ms, s, m, h, d) that keeps the magnitude ≥ 1 is chosen,
/// the value is printed with three decimals and trailing zeros (and dot) are dropped.
pub fn format_span(ns: i64) -> String {
    const US: i64 = 1_000;
    const MS: i64 = 1_000_000;
    const S: i64 = 1_000_000_000;
    const M: i64 = 60 * S;
    const H: i64 = 60 * M;
    const D: i64 = 24 * H;
    let abs = ns.unsigned_abs();
    let (div, unit) = if abs >= D as u64 {
        (D, "d")
    } else if abs >= H as u64 {
        (H, "h")
    } else if abs >= M as u64 {
        (M, "m")
    } else if abs >= S as u64 {
        (S, "s")
    } else if abs >= MS as u64 {
        (MS, "ms")
    } else if abs >= US as u64 {
        (US, "us")
    } else {
        (1, "ns")
    };
    let value = ns as f64 / div as f64;
    let mut s = format!("{value:.3}");
    if s.contains('.') {
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
    }
    if s == "-0" {
        s = "0".into();
    }
    if unit == "d" {
        s = group_thousands(&s);
    }
    s.push_str(unit);
    s
}

/// Core separates thousands with `_` in the integer part (only reachable for days).
fn group_thousands(s: &str) -> String {
    let (sign, rest) = s.strip_prefix('-').map_or(("", s), |r| ("-", r));
    let (int, frac) = rest
        .split_once('.')
        .map_or((rest, None), |(a, b)| (a, Some(b)));
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push('_');
        }
        out.push(c);
    }
    let mut r = format!("{sign}{out}");
    if let Some(f) = frac {
        r.push('.');
        r.push_str(f);
    }
    r
}

impl TraceSink for TranscriptSink {
    type Thread = u32;

    fn allocate_pid(&mut self, _name: &str) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    fn allocate_thread(&mut self, _pid: u32, _name: &str) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    fn duration_begin(&mut self, _t: u32, name: &str, time: i64, _args: &[Arg<'_>]) {
        self.line(Some(time), "BEGIN", name);
    }

    fn duration_end(&mut self, _t: u32, name: &str, time: i64, _args: &[Arg<'_>]) {
        self.line(Some(time), "END  ", name);
    }

    fn duration_complete(&mut self, _t: u32, name: &str, start: i64, end: i64, _a: &[Arg<'_>]) {
        if HIDDEN.contains(&name) {
            return;
        }
        self.line(Some(start), "BEGIN", name);
        self.line(Some(end), "END  ", name);
    }

    fn duration_instant(&mut self, _t: u32, name: &str, time: i64, _args: &[Arg<'_>]) {
        if HIDDEN.contains(&name) {
            return;
        }
        self.line(Some(time), "BEGIN", name);
        self.line(None, "END  ", name);
    }

    fn counter(&mut self, _t: u32, _name: &str, _time: i64, _args: &[Arg<'_>]) {}

    fn end_of_input(&mut self) {
        self.lines.push(END_OF_INPUT.to_string());
    }

    fn warning(&mut self, message: &str) {
        self.warnings.push(message.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_format_like_core() {
        assert_eq!(format_span(0), "0ns");
        assert_eq!(format_span(436), "436ns");
        assert_eq!(format_span(2_253), "2.253us");
        assert_eq!(format_span(11_450), "11.45us");
        assert_eq!(format_span(105_943), "105.943us");
        assert_eq!(format_span(1_500_000), "1.5ms");
        assert_eq!(format_span(1_000), "1us");
        assert_eq!(format_span(-1), "-1ns");
        assert_eq!(format_span(90 * 1_000_000_000), "1.5m");
        assert_eq!(format_span(1_000 * 86_400 * 1_000_000_000), "1_000d");
    }
}
