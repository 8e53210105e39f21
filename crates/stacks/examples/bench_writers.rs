//! Stack-writer speed and memory: legacy vs segments on the same event stream.
//!
//! Decodes `hello_world_userspace/input.perf` once, then feeds it N times (times
//! shifted forward each repetition, so it reads as one long trace) to one writer
//! whose sink only counts, and prints events/s and peak RSS. Run each writer in its
//! own process so the peak RSS is its own:
//!
//! ```text
//! cargo run --release -p ptscope-stacks --example bench_writers -- legacy 10000000
//! cargo run --release -p ptscope-stacks --example bench_writers -- segments 10000000
//! cargo run --release -p ptscope-stacks --example bench_writers -- legacy-ordered 10000000
//! ```
//!
//! `legacy-ordered` puts the [`OrderedSink`] the CLI uses for legacy FXT output between
//! the writer and the counting sink.

use ptscope_decode::Decoder;
use ptscope_event::Event;
use ptscope_stacks::legacy::LegacyWriter;
use ptscope_stacks::ordered::OrderedSink;
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::{Arg, StackWriter, TraceSink, WriterConfig};
use std::time::Instant;

#[path = "../../../tests/fixtures_dir.rs"]
mod fixtures;

/// Counts what it is given and keeps nothing.
#[derive(Default)]
struct CountingSink {
    events: u64,
}

impl TraceSink for CountingSink {
    type Thread = u32;
    fn allocate_pid(&mut self, _: &str) -> u32 {
        0
    }
    fn allocate_thread(&mut self, _: u32, _: &str) -> u32 {
        0
    }
    fn duration_begin(&mut self, _: u32, _: &str, _: i64, _: &[Arg<'_>]) {
        self.events += 1;
    }
    fn duration_end(&mut self, _: u32, _: &str, _: i64, _: &[Arg<'_>]) {
        self.events += 1;
    }
    fn duration_complete(&mut self, _: u32, _: &str, _: i64, _: i64, _: &[Arg<'_>]) {
        self.events += 1;
    }
    fn duration_instant(&mut self, _: u32, _: &str, _: i64, _: &[Arg<'_>]) {
        self.events += 1;
    }
    fn counter(&mut self, _: u32, _: &str, _: i64, _: &[Arg<'_>]) {
        self.events += 1;
    }
    fn warning(&mut self, _: &str) {}
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn run<W: StackWriter<CountingSink>>(
    w: W,
    events: &[Event],
    span: u64,
    target: u64,
    strings: &ptscope_event::StringTable,
) -> (u64, u64) {
    let (fed, sink) = feed(w, events, span, target, strings);
    (fed, sink.events)
}

fn feed<S: TraceSink, W: StackWriter<S>>(
    mut w: W,
    events: &[Event],
    span: u64,
    target: u64,
    strings: &ptscope_event::StringTable,
) -> (u64, S) {
    let mut fed = 0u64;
    let mut rep = 0u64;
    let mut ev;
    while fed < target {
        for e in events {
            ev = e.clone();
            ev.map_time(|t| t + rep * span);
            w.write_event(&ev, strings);
            fed += 1;
            if fed >= target {
                break;
            }
        }
        rep += 1;
    }
    (fed, w.finish(strings))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "segments".into());
    let target: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let path = fixtures::fixtures_dir().join("magic-trace/hello_world_userspace/input.perf");
    let mut d = Decoder::open(&path).expect("fixture");
    let mut events = Vec::new();
    while let Some(e) = d.next_event().expect("decode") {
        events.push(e);
    }
    let first = events.first().and_then(|e| e.time()).unwrap_or(0);
    let last = events
        .iter()
        .filter_map(|e| e.time())
        .max()
        .unwrap_or(first);
    let span = last - first + 1000;
    let config = WriterConfig {
        earliest_time: first,
        ..WriterConfig::default()
    };
    let before = peak_rss_kib();
    let start = Instant::now();
    let (fed, out) = match which.as_str() {
        "legacy" => run(
            LegacyWriter::new(CountingSink::default(), config),
            &events,
            span,
            target,
            d.strings(),
        ),
        "legacy-ordered" => {
            let (fed, ordered) = feed(
                LegacyWriter::new(OrderedSink::new(CountingSink::default()), config),
                &events,
                span,
                target,
                d.strings(),
            );
            (fed, ordered.finish().expect("spool").events)
        }
        _ => run(
            SegmentsWriter::new(CountingSink::default(), config),
            &events,
            span,
            target,
            d.strings(),
        ),
    };
    let secs = start.elapsed().as_secs_f64();
    let peak = peak_rss_kib();
    println!(
        "{which}: {fed} input events -> {out} trace events in {secs:.2} s = {:.2} M events/s; peak RSS {} MiB (baseline {} MiB) = {:.1} bytes/input event",
        fed as f64 / secs / 1e6,
        peak / 1024,
        before / 1024,
        (peak.saturating_sub(before) * 1024) as f64 / fed as f64
    );
}
