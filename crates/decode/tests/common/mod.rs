//! Shared helpers: fixture paths, the parser-case file format, and rendering events
//! in the OCaml sexp form magic-trace's parser tests print.
#![allow(dead_code)]

use ptscope_decode::{Decoder, Stats, Warning};
use ptscope_event::{Event, EventData, ExtraEvent, Kind, Location, StringTable, TraceStateChange};
use std::path::PathBuf;

#[path = "../../../../tests/fixtures_dir.rs"]
mod fixtures;

/// The repository's `tests/fixtures/magic-trace`.
pub fn fixtures_dir() -> PathBuf {
    fixtures::fixtures_dir().join("magic-trace")
}

/// The names of the nine recorded fixture cases.
pub const FIXTURES: [&str; 9] = [
    "c_demo_sampling",
    "demo_sampling_with_branch_misses_and_cache_misses",
    "demo_with_branch_misses_and_cache_misses",
    "hello_world_userspace",
    "memmove_decode_error",
    "ocaml_exceptions_poptrap_corner_case_notraps",
    "ocaml_exceptions_poptrap_corner_case_traps",
    "ocaml_exceptions_traps",
    "simple_gogo",
];

pub fn read_fixture(name: &str) -> Vec<u8> {
    let path = fixtures_dir().join(name).join("input.perf");
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// One `### name / --- input / --- expected` case.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub input: String,
    pub expected: String,
}

pub fn parse_cases(text: &str) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    let mut section = 0; // 0 = preamble, 1 = input, 2 = expected
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("### ") {
            cases.push(Case {
                name: name.to_string(),
                input: String::new(),
                expected: String::new(),
            });
            section = 0;
        } else if line == "--- input" {
            section = 1;
        } else if line.starts_with("--- expected") {
            section = 2;
        } else if let Some(case) = cases.last_mut() {
            let target = match section {
                1 => &mut case.input,
                2 => &mut case.expected,
                _ => continue,
            };
            target.push_str(line);
            target.push('\n');
        }
    }
    cases
}

/// What is left of a decoder once the input is decoded.
pub struct Decoded {
    strings: StringTable,
    stats: Stats,
    warnings: Vec<Warning>,
}

impl Decoded {
    pub fn strings(&self) -> &StringTable {
        &self.strings
    }
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }
}

/// Decodes all of `input`, returning the events and the decoder's leftovers.
pub fn decode_all(input: &[u8]) -> (Vec<Event>, Decoded) {
    let mut d = Decoder::new(input).with_kept_warnings(usize::MAX);
    let mut events = Vec::new();
    while let Some(e) = d.next_event().expect("reading a slice cannot fail") {
        events.push(e);
    }
    let stats = *d.stats();
    let warnings = d.warnings().to_vec();
    (
        events,
        Decoded {
            strings: d.into_strings(),
            stats,
            warnings,
        },
    )
}

/// Collapses whitespace so sexps printed with different line breaks compare equal.
pub fn normalise(sexp: &str) -> String {
    let mut out = String::new();
    for tok in sexp.split_whitespace() {
        if !out.is_empty() && !out.ends_with('(') && !tok.starts_with(')') {
            out.push(' ');
        }
        out.push_str(tok);
    }
    out
}

/// Core's `Time_ns.Span.to_string` for spans of a minute or more (all the cases).
pub fn span(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let frac = ns % 1_000_000_000;
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if d > 0 {
        out += &format!("{d}d");
    }
    if h > 0 {
        out += &format!("{h}h");
    }
    if m > 0 {
        out += &format!("{m}m");
    }
    out += &s.to_string();
    if frac > 0 {
        let f = format!("{frac:09}");
        out.push('.');
        out.push_str(f.trim_end_matches('0'));
    }
    out.push('s');
    out
}

fn loc(l: &Location) -> String {
    ptscope_event::ocaml_int64_hex(l.ip)
}

fn atom(s: &str) -> String {
    if !s.is_empty()
        && !s
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '(' | ')' | '"' | ';' | '\\'))
    {
        s.to_string()
    } else {
        format!("{s:?}")
    }
}

fn opt_id(v: Option<u32>) -> String {
    v.map_or("()".to_string(), |v| format!("({v})"))
}

/// Renders `event` like magic-trace's `[%sexp_of: Event.t option]`.
pub fn render(event: Option<&Event>, strings: &StringTable) -> String {
    let Some(event) = event else {
        return "()".to_string();
    };
    let body = match event {
        Event::Ok {
            thread,
            time,
            data,
            in_transaction,
        } => {
            let data = match data {
                EventData::Trace {
                    change,
                    kind,
                    src,
                    dst,
                } => {
                    let mut s = "(Trace".to_string();
                    if let Some(c) = change {
                        s += match c {
                            TraceStateChange::Start => " (trace_state_change Start)",
                            TraceStateChange::End => " (trace_state_change End)",
                        };
                    }
                    if let Some(k) = kind {
                        let k = match k {
                            Kind::Async => "Async",
                            Kind::Call => "Call",
                            Kind::Return => "Return",
                            Kind::Syscall => "Syscall",
                            Kind::Sysret => "Sysret",
                            Kind::HardwareInterrupt => "Hardware_interrupt",
                            Kind::Interrupt => "Interrupt",
                            Kind::Iret => "Iret",
                            Kind::Jump => "Jump",
                            Kind::TxAbort => "Tx_abort",
                        };
                        s += &format!(" (kind {k})");
                    }
                    s + &format!(
                        " (src {}) (dst {}))",
                        loc(strings.location(*src)),
                        loc(strings.location(*dst))
                    )
                }
                EventData::Power { freq_mhz } => format!("(Power (freq {freq_mhz}))"),
                EventData::StackSample { callstack } => {
                    let frames: Vec<String> = strings.stack(*callstack).map(loc).collect();
                    format!("(Stacktrace_sample (callstack ({})))", frames.join(" "))
                }
                EventData::SwitchOutStack { callstack } => {
                    let frames: Vec<String> = strings.stack(*callstack).map(loc).collect();
                    format!("(Switch_out_stack (callstack ({})))", frames.join(" "))
                }
                EventData::EventSample {
                    location,
                    count,
                    name,
                } => {
                    let name = match name {
                        ExtraEvent::BranchMisses => "Branch_misses",
                        ExtraEvent::CacheMisses => "Cache_misses",
                    };
                    format!(
                        "(Event_sample (location {}) (count {count}) (name {name}))",
                        loc(location)
                    )
                }
                EventData::Ptwrite { location, data } => {
                    format!("(Ptwrite (location {}) (data 0x{data:x}))", loc(location))
                }
                // magic-trace has no such events; ptscope's own rendering.
                EventData::Comm { name, exec } => {
                    format!("(Comm (name {}) (exec {exec}))", atom(strings.get(*name)))
                }
                EventData::Fork { parent } => format!(
                    "(Fork (parent ((pid {}) (tid {}))))",
                    opt_id(parent.pid),
                    opt_id(parent.tid)
                ),
                EventData::Switch { out, preempt } => {
                    format!("(Switch (out {out}) (preempt {preempt}))")
                }
            };
            let tx = if *in_transaction {
                " (in_transaction true)"
            } else {
                ""
            };
            format!(
                "(Ok ((thread ((pid {}) (tid {}))) (time {}) (data {data}){tx}))",
                opt_id(thread.pid),
                opt_id(thread.tid),
                span(*time)
            )
        }
        Event::DecodeError {
            thread,
            time,
            ip,
            message,
        } => format!(
            "(Error ((thread ((pid {}) (tid {}))) (time {}) (instruction_pointer {}) (message {})))",
            opt_id(thread.pid),
            opt_id(thread.tid),
            time.map_or("()".to_string(), |t| format!("({})", span(t))),
            ip.map_or("()".to_string(), |ip| format!("({})", ptscope_event::ocaml_int64_hex(ip))),
            atom(strings.get(*message)),
        ),
    };
    format!("({body})")
}
