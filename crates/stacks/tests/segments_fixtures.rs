//! The segments writer on magic-trace's fixtures: identical slices wherever the
//! legacy writer is right, and the documented improvements where it is not
//! (see FIDELITY.md).

use ptscope_decode::Decoder;
use ptscope_event::{Event, EventData, OcamlExceptionInfo, TraceScope};
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::transcript::{TranscriptSink, END_OF_INPUT};
use ptscope_stacks::{Arg, StackWriter, TraceSink, WriterConfig};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Records exact slices (the writer emits them in order, so a stack pairs them).
#[derive(Default)]
struct SliceSink {
    open: Vec<(i64, String)>,
    slices: BTreeSet<Slice>,
}

impl TraceSink for SliceSink {
    type Thread = u32;
    fn allocate_pid(&mut self, _: &str) -> u32 {
        0
    }
    fn allocate_thread(&mut self, _: u32, _: &str) -> u32 {
        0
    }
    fn duration_begin(&mut self, _: u32, name: &str, time: i64, _: &[Arg<'_>]) {
        self.open.push((time, name.to_string()));
    }
    fn duration_end(&mut self, _: u32, _: &str, time: i64, _: &[Arg<'_>]) {
        let (s, n) = self.open.pop().expect("end without begin");
        assert!(time >= s, "time went backwards");
        self.slices.insert((s, time, self.open.len(), n));
    }
    fn duration_complete(&mut self, _: u32, _: &str, _: i64, _: i64, _: &[Arg<'_>]) {}
    fn duration_instant(&mut self, _: u32, _: &str, _: i64, _: &[Arg<'_>]) {}
    fn counter(&mut self, _: u32, _: &str, _: i64, _: &[Arg<'_>]) {}
    fn warning(&mut self, _: &str) {}
}

#[path = "../../../tests/fixtures_dir.rs"]
mod fixtures;

fn case_dir(name: &str) -> PathBuf {
    fixtures::fixtures_dir().join("magic-trace").join(name)
}

/// A slice: (start ns, end ns, depth, name).
type Slice = (i64, i64, usize, String);

fn parse_span(t: &str) -> i64 {
    let (num, unit) = t
        .find(|c: char| c.is_ascii_alphabetic())
        .map(|i| t.split_at(i))
        .expect("unit");
    let mult = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        u => panic!("unit {u}"),
    };
    (num.replace('_', "").parse::<f64>().expect("number") * mult).round() as i64
}

/// Slices of a transcript, read the way Perfetto reads a trace: a stable sort by
/// time, then begin/end nesting.
fn slices(transcript: &str) -> BTreeSet<Slice> {
    let mut events: Vec<(i64, bool, String)> = Vec::new();
    for l in transcript.lines() {
        let Some(rest) = l.strip_prefix("-> ") else {
            continue;
        };
        let rest = rest.trim_start();
        let (time, rest) = if rest.starts_with("END   ") || rest.starts_with("BEGIN ") {
            (
                events
                    .last()
                    .map(|e| e.0)
                    .expect("instant end follows its begin"),
                rest,
            )
        } else {
            let (t, r) = rest.split_once(' ').expect("time");
            (parse_span(t), r)
        };
        let (kind, name) = rest.split_at(6);
        let name = name.trim_end_matches(" [inferred start time]").to_string();
        events.push((time, kind == "BEGIN ", name));
    }
    events.sort_by_key(|e| e.0);
    let mut stack: Vec<(i64, String)> = Vec::new();
    let mut out = BTreeSet::new();
    for (t, begin, name) in events {
        if begin {
            stack.push((t, name));
        } else if let Some((s, n)) = stack.pop() {
            out.insert((s, t, stack.len(), n));
        }
    }
    assert!(stack.is_empty(), "unclosed slices");
    out
}

fn run_segments(
    name: &str,
    scope: TraceScope,
    traps: Option<OcamlExceptionInfo>,
) -> (String, Vec<Event>) {
    let mut d = Decoder::open(case_dir(name).join("input.perf")).expect("input");
    let mut events = Vec::new();
    while let Some(e) = d.next_event().expect("decode") {
        events.push(e);
    }
    let mut w = SegmentsWriter::new(
        TranscriptSink::default(),
        WriterConfig {
            scope,
            annotate_inferred_start_times: true,
            ocaml_exception_info: traps,
            earliest_time: events[0].time().expect("time"),
            ..WriterConfig::default()
        },
    );
    for e in &events {
        w.write_event(e, d.strings());
    }
    w.end_of_input();
    let t = w.finish(d.strings());
    let mut text = t.render();
    // The segments writer writes everything at the end; drop the marker for slicing.
    text = text.replace(&format!("{END_OF_INPUT}\n"), "");
    (text, events)
}

fn expected(name: &str) -> String {
    std::fs::read_to_string(case_dir(name).join("expected.txt")).expect("expected.txt")
}

/// The slices in begin order (pre-order of the call tree), as (depth, name).
fn tree(s: &BTreeSet<Slice>) -> Vec<(usize, String)> {
    s.iter().map(|x| (x.2, x.3.clone())).collect()
}

/// Where magic-trace's writer makes no mistake, the segments writer builds the same
/// call tree. Times may differ: equal timestamps are spread up to the next event of
/// any kind (magic-trace spreads up to the next call or return, so its frames start
/// late), hence every segments slice starts no later than magic-trace's.
#[test]
fn same_call_tree_on_clean_pt_fixtures() {
    for (name, traps) in [
        ("hello_world_userspace", None),
        ("demo_with_branch_misses_and_cache_misses", None),
        (
            "ocaml_exceptions_traps",
            Some(OcamlExceptionInfo::new(
                &[0x41100b],
                &[0x411026],
                &[0x411030],
            )),
        ),
        (
            "ocaml_exceptions_poptrap_corner_case_traps",
            Some(OcamlExceptionInfo::new(
                &[0xcb457d],
                &[0xcb459c],
                &[0xffffff],
            )),
        ),
        (
            "ocaml_exceptions_poptrap_corner_case_notraps",
            Some(OcamlExceptionInfo::new(&[], &[], &[])),
        ),
    ] {
        let (got, _) = run_segments(name, TraceScope::Userspace, traps);
        let (got, legacy) = (slices(&got), slices(&expected(name)));
        assert_eq!(tree(&got), tree(&legacy), "{name}");
        let mut earlier = 0;
        for (g, l) in got.iter().zip(legacy.iter()) {
            // Transcript times above 1 ms print with µs precision.
            assert!(
                g.0 <= l.0 + 1000,
                "{name}: {g:?} starts after magic-trace's {l:?}"
            );
            earlier += (g.0 < l.0) as usize;
        }
        if name == "hello_world_userspace" {
            assert!(earlier >= 20, "{name}: only {earlier} slices start earlier");
        }
    }
}

/// A decode error inside memmove no longer breaks the stack: the stacks before and
/// after the gap line up, so add_order and the memmove call continue through it.
#[test]
fn decode_error_is_stitched() {
    let (got, _) = run_segments("memmove_decode_error", TraceScope::Userspace, None);
    let s = slices(&got);
    let add_order = "itch_bbo::book::Book::add_order".to_string();
    let memmove = "__memmove_avx_unaligned_erms".to_string();
    assert!(s.contains(&(0, 141, 0, add_order.clone())), "{s:?}");
    assert!(s.contains(&(21, 141, 1, memmove.clone())), "{s:?}");
    assert!(s.contains(&(19, 20, 1, memmove)), "{s:?}");
    assert!(
        s.contains(&(21, 21, 2, "[decode error: Overflow packet]".to_string())),
        "{s:?}"
    );
    assert_eq!(s.iter().filter(|x| x.3 == add_order).count(), 1, "{s:?}");
    assert!(got.starts_with("Warning: perf reported an error decoding the trace: 'Overflow packet' @ IP 0x7ffff7327730.\n"));
}

/// Returning from `gogo` resumes `runtime.gopark` instead of closing and reopening it.
#[test]
fn gogo_resumes_the_parked_frame() {
    let (got, _) = run_segments("simple_gogo", TraceScope::Userspace, None);
    let s = slices(&got);
    let legacy = slices(&expected("simple_gogo"));
    let gopark: Vec<_> = s.iter().filter(|x| x.3 == "runtime.gopark").collect();
    assert_eq!(gopark, [&(39, 70982, 3, "runtime.gopark".to_string())]);
    // Otherwise the same tree as magic-trace, which splits gopark in two at 70.97us.
    let mut legacy_tree = tree(&legacy);
    let split = legacy_tree
        .iter()
        .rposition(|x| x.1 == "runtime.gopark")
        .expect("second gopark");
    legacy_tree.remove(split);
    assert_eq!(tree(&s), legacy_tree);
}

/// In sampling mode, just before each next sample the reconstructed stack is exactly
/// the sampled stack (root first), whatever frames were merged across samples.
#[test]
fn sampled_stacks_are_reproduced_at_every_sample() {
    for name in [
        "c_demo_sampling",
        "demo_sampling_with_branch_misses_and_cache_misses",
    ] {
        let mut d = Decoder::open(case_dir(name).join("input.perf")).expect("input");
        let mut events = Vec::new();
        while let Some(e) = d.next_event().expect("decode") {
            events.push(e);
        }
        let t0_raw = events[0].time().expect("time");
        let mut w = SegmentsWriter::new(
            SliceSink::default(),
            WriterConfig {
                earliest_time: t0_raw,
                // Every frame, kernel ones included (the default `u` drops those).
                scope: ptscope_event::TraceScope::UserspaceAndKernel,
                ..WriterConfig::default()
            },
        );
        for e in &events {
            w.write_event(e, d.strings());
        }
        let s = w.finish(d.strings()).slices;
        let t0 = events[0].time().expect("time") as i64;
        let samples: Vec<(i64, Vec<String>)> = events
            .iter()
            .filter_map(|e| match e {
                Event::Ok {
                    time,
                    data: EventData::StackSample { callstack },
                    ..
                } => Some((
                    *time as i64 - t0,
                    (d.strings().stack(*callstack))
                        .map(|l| d.strings().display(l.symbol).to_string())
                        .collect(),
                )),
                _ => None,
            })
            .collect();
        let mut checked = 0;
        for w in samples.windows(2) {
            let (t, ref stack) = w[0];
            let next = w[1].0;
            if next <= t + 1 {
                continue;
            }
            let at = next - 1;
            let mut open: Vec<&Slice> = s
                .iter()
                .filter(|x| {
                    x.0 <= at && at < x.1 && x.3 != "branch-misses" && x.3 != "cache-misses"
                })
                .collect();
            open.sort_by_key(|x| x.2);
            let names: Vec<String> = open.iter().map(|x| x.3.clone()).collect();
            assert_eq!(&names, stack, "{name}: stack just before {next}ns");
            checked += 1;
        }
        assert!(checked > 100, "{name}: only {checked} samples checked");
    }
}
