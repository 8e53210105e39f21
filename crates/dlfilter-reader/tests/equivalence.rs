//! The dlfilter path and the text path give the same events and the same traces on
//! recordings made here: cpu-clock sampling with callchains, uprobes, breakpoints.

mod common;

use common::*;
use ptscope_decode::{PerfScript, PerfScriptOptions, RecordingKind};
use ptscope_dlfilter_reader::{DlfilterOptions, DlfilterScript};
use ptscope_event::{Event, StringTable};
use ptscope_stacks::segments::{SegmentsConfig, SegmentsWriter};
use ptscope_stacks::transcript::TranscriptSink;
use std::path::Path;

fn transcript(events: &[Event], strings: &StringTable) -> String {
    let earliest_time = events.iter().find_map(|e| e.time()).unwrap_or(0);
    let mut w = SegmentsWriter::new(
        TranscriptSink::default(),
        SegmentsConfig {
            earliest_time,
            ..SegmentsConfig::default()
        },
    );
    for e in events {
        w.write_event(e, strings);
    }
    w.sink_mut().end_of_input();
    w.finish(strings).render()
}

struct Decoded {
    events: Vec<String>,
    transcript: String,
    text_lines: u64,
}

fn text_path(data: &Path) -> Decoded {
    let mut o = PerfScriptOptions::new(data);
    o.kind = Some(RecordingKind::Sampling);
    let mut s = PerfScript::spawn(&o).expect("perf script");
    let mut events = Vec::new();
    while let Some(e) = s.next_event().expect("text decode") {
        events.push(e);
    }
    s.finish().expect("perf script exit");
    let strings = s.take_strings();
    Decoded {
        events: events.iter().map(|e| norm(e, &strings)).collect(),
        transcript: transcript(&events, &strings),
        text_lines: s.decoder().stats().lines,
    }
}

fn dlfilter_path(data: &Path) -> Decoded {
    let mut o = DlfilterOptions::new(data);
    o.kind = Some(RecordingKind::Sampling);
    let mut s = DlfilterScript::spawn(&o).expect("perf script --dlfilter");
    let mut events = Vec::new();
    while let Some(e) = s.next_event().expect("dlfilter decode") {
        events.push(e);
    }
    s.finish().expect("perf exit");
    let text_lines = s.stats().lines;
    let strings = s.take_strings();
    Decoded {
        events: events.iter().map(|e| norm(e, &strings)).collect(),
        transcript: transcript(&events, &strings),
        text_lines,
    }
}

/// Decodes both ways and compares; returns (events, text lines on the dlfilter path).
fn compare(data: &Path) -> (usize, u64) {
    let t = text_path(data);
    let d = dlfilter_path(data);
    assert_eq!(
        t.events.len(),
        d.events.len(),
        "event counts differ for {data:?}"
    );
    for (i, (a, b)) in t.events.iter().zip(&d.events).enumerate() {
        assert_eq!(a, b, "event {i} differs for {data:?}");
    }
    assert_eq!(t.transcript, d.transcript, "traces differ for {data:?}");
    assert!(!t.transcript.is_empty());
    (t.events.len(), d.text_lines)
}

#[test]
fn cpu_clock_sampling_with_callchains() {
    if !perf_usable("cpu_clock_sampling_with_callchains") {
        return;
    }
    let dir = scratch("cpuclock");
    let exe = build_prog(&dir, "prog");
    let data = dir.join("perf.data");
    let exe_s = exe.to_string_lossy().into_owned();
    record(
        &data,
        &["-e", "cpu-clock", "-c", "50000", "-g"],
        &[&exe_s, "150"],
    );
    let (n, lines) = compare(&data);
    assert!(n > 100, "only {n} samples");
    // Every sample went through the binary records, none through perf's text.
    assert_eq!(lines, 0);
    // Kernel and user frames both appear, with names.
    let d = dlfilter_path(&data);
    assert!(d
        .events
        .iter()
        .any(|e| e.contains("leaf+") && e.contains("main+")));
}

#[test]
fn cpu_clock_without_callchains() {
    if !perf_usable("cpu_clock_without_callchains") {
        return;
    }
    let dir = scratch("cpuclock-nog");
    let exe = build_prog(&dir, "prog");
    let data = dir.join("perf.data");
    let exe_s = exe.to_string_lossy().into_owned();
    record(
        &data,
        &["-e", "cpu-clock", "-c", "100000"],
        &[&exe_s, "100"],
    );
    let (n, lines) = compare(&data);
    assert!(n > 20, "only {n} samples");
    assert_eq!(lines, 0);
}

#[test]
fn uprobe_events() {
    if !perf_usable("uprobe_events") {
        return;
    }
    let dir = scratch("uprobe");
    let exe = build_prog(&dir, "prog");
    let exe_s = exe.to_string_lossy().into_owned();
    // A group of our own, so concurrent tests and users are untouched.
    let group = format!("ptsdlf{}", std::process::id());
    let _guard = ProbeGuard(group.clone());
    let st = std::process::Command::new("perf")
        .args([
            "probe",
            "-q",
            "-x",
            &exe_s,
            &format!("{group}:leafhit=leaf"),
        ])
        .status()
        .expect("perf probe");
    assert!(st.success(), "perf probe failed");
    let ev = format!("{group}:leafhit");
    for (name, g) in [("up.data", false), ("upg.data", true)] {
        let data = dir.join(name);
        let mut args = vec!["-e", ev.as_str()];
        if g {
            args.push("-g");
        }
        record(&data, &args, &[&exe_s, "5"]);
        let (n, lines) = compare(&data);
        assert_eq!(n, 40, "{name}: 5 × 4 × 2 calls to leaf");
        assert_eq!(lines, 0, "{name}: uprobe samples should be binary records");
    }
}

#[test]
fn breakpoint_events() {
    if !perf_usable("breakpoint_events") {
        return;
    }
    let dir = scratch("breakpoint");
    let exe = build_prog(&dir, "prog");
    let exe_s = exe.to_string_lossy().into_owned();
    let ev = format!("mem:0x{:x}:x", symbol_addr(&exe, "mid"));
    let data = dir.join("bpg.data");
    record(&data, &["-e", &ev, "-g"], &[&exe_s, "5"]);
    let (n, lines) = compare(&data);
    assert_eq!(n, 20, "5 × 4 calls to mid");
    assert_eq!(lines, 0);
    // Without callchains the filter leaves these samples to perf's text, which the
    // text decoder reads (the `mem:0x…:x:` event name included): both paths agree.
    let data = dir.join("bp.data");
    record(&data, &["-e", &ev], &[&exe_s, "5"]);
    let (n, lines) = compare(&data);
    assert_eq!(n, 20, "5 × 4 calls to mid");
    assert!(
        lines >= 20,
        "breakpoint samples should pass through as text"
    );
}
