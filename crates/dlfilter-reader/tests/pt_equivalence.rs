//! On simulated Intel PT recordings (`ptsim`: a real program run under qemu-user, a
//! genuine PT perf.data), the dlfilter path with `keep_jumps` gives the same event
//! stream as the text path — branch kinds, trace starts and ends, decode errors at the
//! same positions — and the same segments transcript. Without `keep_jumps` it gives the
//! same stream minus exactly the jumps `is_dropped_jump` names.

mod common;

use common::norm;
use ptscope_decode::{PerfScript, PerfScriptOptions, RecordingKind};
use ptscope_dlfilter_reader::{is_dropped_jump, DlfilterOptions, DlfilterScript};
use ptscope_event::{Event, EventData, StringTable};
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::transcript::TranscriptSink;
use ptscope_stacks::{StackWriter, WriterConfig};
use ptsim::blocklog::BlockLog;
use ptsim::testing::{compile, record, tools_available};
use ptsim::{simulate, write_outputs, FaultSpec, SimConfig};
use std::path::Path;

/// Calls, returns, recursion, libc (PLT jumps, syscalls: trace off/on), signal handlers
/// (one entered from a syscall, one asynchronous: a timer firing mid-loop) and a second
/// thread (a second AUX queue, interleaved by time).
const PROG_C: &str = r#"
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
volatile long sink;
__attribute__((noinline)) long leaf(long x) { return x * 3 + 1; }
__attribute__((noinline)) long rec(int d) { return d == 0 ? leaf(d) : rec(d - 1) + 1; }
__attribute__((noinline)) long mid(int n) { long s = 0; for (int i = 0; i < n; i++) s += leaf(i); return s + rec(n % 7); }
__attribute__((noinline)) long top(int n) {
    char buf[64]; long s = 0;
    for (int i = 0; i < n; i++) { s += mid(i % 13); snprintf(buf, sizeof buf, "%d", i); s += strlen(buf); }
    return s;
}
static volatile int alarms;
static void on_signal(int sig) { sink += leaf(sig); }
static void on_alarm(int sig) { alarms += 1; sink += leaf(sig); }
static void *worker(void *arg) { sink += top(40); return arg; }
int main(void) {
    pthread_t t;
    signal(SIGUSR1, on_signal);
    raise(SIGUSR1);
    /* A timer signal lands mid-computation: an asynchronous trace end. */
    signal(SIGALRM, on_alarm);
    struct itimerval it = {{0, 0}, {0, 200}};
    setitimer(ITIMER_REAL, &it, 0);
    while (!alarms) sink += leaf(alarms);
    pthread_create(&t, 0, worker, 0);
    sink += top(60);
    pthread_join(t, 0);
    printf("%ld\n", sink);
    return 0;
}
"#;

fn tools() -> bool {
    // Panics under `CI` when one is missing; skips with a message otherwise.
    tools_available(&["qemu-x86_64", "perf", "cc", "nm"])
}

/// One path's decode of a recording.
struct Decoded {
    events: Vec<Event>,
    strings: StringTable,
    /// Lines perf printed as text (the dlfilter path: errors and side events).
    text_lines: u64,
}

impl Decoded {
    fn norm(&self) -> Vec<String> {
        self.events.iter().map(|e| norm(e, &self.strings)).collect()
    }

    /// The segments writer's transcript, as `ptscope decode` drives it.
    fn transcript(&self) -> String {
        let earliest_time = self.events.iter().find_map(|e| e.time()).unwrap_or(0);
        let mut w = SegmentsWriter::new(
            TranscriptSink::default(),
            WriterConfig {
                earliest_time,
                ..WriterConfig::default()
            },
        );
        for e in &self.events {
            w.write_event(e, &self.strings);
        }
        w.end_of_input();
        w.finish(&self.strings).render()
    }
}

fn text_path(data: &Path) -> Decoded {
    let mut o = PerfScriptOptions::new(data);
    o.kind = Some(RecordingKind::IntelPt);
    let mut s = PerfScript::spawn(&o).expect("perf script");
    let mut events = Vec::new();
    while let Some(e) = s.next_event().expect("text decode") {
        events.push(e);
    }
    s.finish().expect("perf script exit");
    Decoded {
        events,
        text_lines: s.decoder().stats().lines,
        strings: s.into_strings(),
    }
}

fn dlfilter_path(data: &Path, keep_jumps: bool) -> Decoded {
    let mut o = DlfilterOptions::new(data);
    o.kind = Some(RecordingKind::IntelPt);
    o.keep_jumps = keep_jumps;
    let mut s = DlfilterScript::spawn(&o).expect("perf script --dlfilter");
    let mut events = Vec::new();
    while let Some(e) = s.next_event().expect("dlfilter decode") {
        events.push(e);
    }
    s.finish().expect("perf exit");
    Decoded {
        events,
        text_lines: s.stats().lines,
        strings: s.into_strings(),
    }
}

fn assert_same(what: &str, a: &[String], b: &[String]) {
    if let Some(i) = a.iter().zip(b).position(|(x, y)| x != y) {
        let lo = i.saturating_sub(3);
        panic!(
            "{what}: event {i} differs\ntext:\n  {}\ndlfilter:\n  {}",
            a[lo..(i + 3).min(a.len())].join("\n  "),
            b[lo..(i + 3).min(b.len())].join("\n  ")
        );
    }
    assert_eq!(a.len(), b.len(), "{what}: event counts differ");
}

/// What one recording showed, for the caller's checks.
struct Summary {
    branches: usize,
    errors: usize,
    trace_changes: usize,
    dlfilter_text_lines: u64,
    dropped: usize,
}

/// Decodes `data` three ways and checks the dlfilter path against the text path.
fn compare(what: &str, data: &Path) -> Summary {
    let text = text_path(data);
    let kept = dlfilter_path(data, true);
    let t = text.norm();
    assert_same(what, &t, &kept.norm());
    let tr = text.transcript();
    assert!(!tr.is_empty(), "{what}: empty transcript");
    assert_eq!(tr, kept.transcript(), "{what}: transcripts differ");

    // Default options: the same stream without the jumps the filter drops.
    let lean = dlfilter_path(data, false);
    let expected: Vec<String> = text
        .events
        .iter()
        .filter(|e| !is_dropped_jump(e, &text.strings))
        .map(|e| norm(e, &text.strings))
        .collect();
    assert_same(&format!("{what} (jumps dropped)"), &expected, &lean.norm());

    let s = Summary {
        branches: text
            .events
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    Event::Ok {
                        data: EventData::Trace { .. },
                        ..
                    }
                )
            })
            .count(),
        errors: text
            .events
            .iter()
            .filter(|e| matches!(e, Event::DecodeError { .. }))
            .count(),
        trace_changes: text
            .events
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    Event::Ok {
                        data: EventData::Trace {
                            change: Some(_),
                            ..
                        },
                        ..
                    }
                )
            })
            .count(),
        dlfilter_text_lines: kept.text_lines,
        dropped: text.events.len() - lean.events.len(),
    };
    eprintln!(
        "{what}: {} events, {} branches, {} trace starts/ends, {} errors; {} jumps dropped; \
         {} of {} lines as text on the dlfilter path",
        text.events.len(),
        s.branches,
        s.trace_changes,
        s.errors,
        s.dropped,
        s.dlfilter_text_lines,
        text.text_lines
    );
    // Branches travel as records; only errors and PT side events (psb, cbr) as text.
    assert!(
        s.dlfilter_text_lines * 100 < text.text_lines,
        "{what}: {} of {} lines came as text",
        s.dlfilter_text_lines,
        text.text_lines
    );
    s
}

#[test]
fn simulated_pt_full_snapshot_and_faults() {
    if !tools() {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("ptscope-test-dlf-pt-")
        .tempdir()
        .expect("scratch dir");
    let dir = tmp.path().to_path_buf();
    let exe = compile(
        &dir,
        "prog",
        "prog.c",
        PROG_C,
        &["cc", "-O1", "-fno-inline", "-no-pie", "-pthread"],
    )
    .expect("compile");
    let out = record(&dir, &[&exe], &SimConfig::default()).expect("ptsim record");
    assert!(out.status.success(), "program failed under qemu");

    // Full execution: `tr strt` at ld.so's entry, syscalls as `tr end`/`tr strt`, two threads.
    let full = compare("full", &dir.join("perf.data"));
    assert!(full.branches > 10_000, "only {} branches", full.branches);
    assert!(
        full.trace_changes > 10,
        "{} trace changes",
        full.trace_changes
    );
    assert_eq!(full.errors, 0);
    assert!(full.dropped > 1000, "only {} jumps dropped", full.dropped);

    // The other variants re-encode the same execution.
    let log = BlockLog::read(&dir.join("ptsim-blocks.log")).expect("block log");
    let mut snapshot = SimConfig {
        snapshot_size: Some(8 << 10),
        ..SimConfig::default()
    };
    // Decoding can only start at a PSB, so the buffer must hold a few.
    snapshot.pt.psb_period = 1024;
    let faults = SimConfig {
        faults: FaultSpec::parse("overflow=3,corrupt=3,overflow-len=50").expect("fault spec"),
        ..SimConfig::default()
    };
    for (name, cfg) in [("snapshot", snapshot), ("faults", faults)] {
        let sub = dir.join(name);
        std::fs::create_dir_all(&sub).expect("subdir");
        let sim = simulate(&log, "prog", &cfg);
        write_outputs(&sim, &sub.join("perf.data"), false).expect("write recording");
        let s = compare(name, &sub.join("perf.data"));
        assert!(s.branches > 1000, "{name}: only {} branches", s.branches);
        if name == "snapshot" {
            assert!(
                s.branches < full.branches / 2,
                "snapshot holds the end only"
            );
        } else {
            // Each overflow and corrupt packet is a decode error, on both paths, in place.
            assert!(s.errors >= 6, "{name}: {} errors", s.errors);
            assert!(s.dlfilter_text_lines >= s.errors as u64);
        }
    }
    if std::env::var_os("PTSCOPE_KEEP_TEST_DIR").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
