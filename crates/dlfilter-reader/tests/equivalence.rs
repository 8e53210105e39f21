//! The dlfilter path and the text path give the same events and the same traces on
//! recordings made here: cpu-clock sampling with callchains, uprobes, breakpoints, and
//! an exec into a program with other names at the same addresses (the filter's caches).

mod common;

use common::*;
use ptscope_decode::{PerfScript, PerfScriptOptions, RecordingKind};
use ptscope_dlfilter_reader::{install_filter, DlfilterOptions, DlfilterScript, RecordReader};
use ptscope_event::{Event, StringTable};
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::transcript::TranscriptSink;
use ptscope_stacks::{StackWriter, WriterConfig};
use std::path::Path;

fn transcript(events: &[Event], strings: &StringTable) -> String {
    let earliest_time = events
        .iter()
        .filter(|e| !e.is_sideband())
        .find_map(|e| e.time())
        .unwrap_or(0);
    let mut w = SegmentsWriter::new(
        TranscriptSink::default(),
        WriterConfig {
            earliest_time,
            ..WriterConfig::default()
        },
    );
    for e in events {
        w.write_event(e, strings);
    }
    w.end_of_input();
    w.finish(strings).render()
}

struct Decoded {
    events: Vec<String>,
    /// Events other than thread names, forks and context switches.
    samples: usize,
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
    let text_lines = s.decoder().stats().lines;
    let strings = s.into_strings();
    Decoded {
        events: events.iter().map(|e| norm(e, &strings)).collect(),
        samples: events.iter().filter(|e| !e.is_sideband()).count(),
        transcript: transcript(&events, &strings),
        text_lines,
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
    // Lines perf printed besides the task (name, fork, exit) and switch lines the text
    // path reads too: such a line is an event, or skipped (`ignored`) for an exit.
    let tasks = events.iter().filter(|e| e.is_sideband()).count() as u64;
    let text_lines = s.stats().lines - tasks - s.stats().ignored;
    let strings = s.into_strings();
    Decoded {
        events: events.iter().map(|e| norm(e, &strings)).collect(),
        samples: events.iter().filter(|e| !e.is_sideband()).count(),
        transcript: transcript(&events, &strings),
        text_lines,
    }
}

/// Decodes both ways and compares; returns (events other than task events, text lines on the dlfilter path
/// other than task lines).
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
    (t.samples, d.text_lines)
}

#[test]
fn cpu_clock_sampling_with_callchains() {
    if !perf_usable("cpu_clock_sampling_with_callchains") {
        return;
    }
    let tmp = scratch("cpuclock");
    let dir = tmp.path();
    let exe = build_prog(dir, "prog");
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
    let tmp = scratch("cpuclock-nog");
    let dir = tmp.path();
    let exe = build_prog(dir, "prog");
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
    let tmp = scratch("uprobe");
    let dir = tmp.path();
    let exe = build_prog(dir, "prog");
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
    let tmp = scratch("breakpoint");
    let dir = tmp.path();
    let exe = build_prog(dir, "prog");
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

/// The most bytes of perf's own text (side-band lines aside, which the reader drops)
/// between two records of the stream `DlfilterScript` reads for `data`.
fn largest_text_run(data: &Path) -> usize {
    let filter = install_filter().expect("install filter");
    let out = std::process::Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(data)
        .args(RecordingKind::Sampling.script_args())
        .arg("--dlfilter")
        .arg(filter.path())
        .args([
            "--show-mmap-events",
            "--show-task-events",
            "--show-bpf-events",
        ])
        .args(["--dlarg", "sideband", "--dlarg", "early"])
        .output()
        .expect("perf script --dlfilter");
    assert!(out.status.success());
    let s = out.stdout;
    let (mut i, mut run, mut largest) = (0, 0, 0);
    while i < s.len() {
        if s[i] == 0 {
            let len = u32::from_le_bytes(s[i + 2..i + 6].try_into().expect("4 bytes"));
            i += 6 + len as usize;
            run = 0;
        } else {
            let end = s[i..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(s.len(), |p| i + p + 1);
            let line = &s[i..end];
            if !line.windows(14).any(|w| w == b": PERF_RECORD_") {
                run += line.len();
                largest = largest.max(run);
            }
            i = end;
        }
    }
    largest
}

/// More than 1 MiB of perf's own text between two records (every sample of a
/// breakpoint without callchains is text): the reader flushes the text to the text
/// decoder mid-way, which once panicked (a line start taken before the flush).
#[test]
fn more_than_a_mebibyte_of_perf_text_between_records() {
    if !perf_usable("more_than_a_mebibyte_of_perf_text_between_records") {
        return;
    }
    let tmp = scratch("bigtext");
    let dir = tmp.path();
    let exe = build_prog(dir, "prog");
    let exe_s = exe.to_string_lossy().into_owned();
    let ev = format!("mem:0x{:x}:x", symbol_addr(&exe, "leaf"));
    let data = dir.join("bp.data");
    record(&data, &["-e", &ev], &[&exe_s, "1500"]);
    let run = largest_text_run(&data);
    assert!(run > 1 << 20, "only {run} bytes of text in a row");
    let (n, lines) = compare(&data);
    // At least one hit per call; a KVM guest under load sometimes reports an execute
    // breakpoint twice for one execution (a CI run: 12 281 hits for 12 000 calls), which
    // both paths then show alike (`compare` checked them event by event).
    assert!(n >= 1500 * 8, "{n} hits for 1500 × 8 calls to leaf");
    assert_eq!(lines, n as u64);
}

/// python3 recorded as `ptscope run` records by default (user-mode cpu-clock, DWARF
/// callchains): perf prints every sample with inlined frames as text, which from a
/// python3 built with debug information is megabytes between two records.
#[test]
fn python3_with_dwarf_callchains() {
    if !perf_usable("python3_with_dwarf_callchains") {
        return;
    }
    let tmp = scratch("python-dwarf");
    let data = tmp.path().join("perf.data");
    record(
        &data,
        &["-e", "cpu-clock/freq=10000/u", "--call-graph", "dwarf"],
        &["python3", "-c", "pass"],
    );
    let run = largest_text_run(&data);
    if run <= 1 << 20 {
        // Debian's python3 has no inline information: its samples are binary records.
        eprintln!("NOTE python3_with_dwarf_callchains: only {run} bytes of text in a row from this python3 (the 1 MiB flush is covered by more_than_a_mebibyte_of_perf_text_between_records)");
    }
    let (n, _) = compare(&data);
    assert!(n > 10, "only {n} samples");
}

/// One source, two programs: the same code at the same addresses (non-PIE) under
/// different names. `alpha` burns CPU, then execs `beta`, which burns CPU too.
const EXEC_C: &str = r#"
#include <stdlib.h>
#include <unistd.h>
volatile long sink;
__attribute__((noinline)) long HOT(long n){ long s=0; for(long i=0;i<n;i++) s+=i*i; return s; }
int main(int argc,char**argv){
    for(int k=0;k<300;k++) sink+=HOT(100000);
    if (argc > 1) execv(argv[1], argv + 1);
    return 0;
}
"#;

#[test]
fn exec_into_a_program_with_the_same_addresses() {
    if !perf_usable("exec_into_a_program_with_the_same_addresses") {
        return;
    }
    let tmp = scratch("exec");
    let dir = tmp.path();
    let src = dir.join("exec.c");
    std::fs::write(&src, EXEC_C).expect("write source");
    let build = |name: &str| {
        let exe = dir.join(name);
        let st = std::process::Command::new("gcc")
            .args(["-O0", "-fno-omit-frame-pointer", "-no-pie"])
            .arg(format!("-DHOT=hot_{name}"))
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .status()
            .expect("gcc");
        assert!(st.success(), "gcc failed");
        exe.to_string_lossy().into_owned()
    };
    let (alpha, beta) = (build("alpha"), build("beta"));
    let data = dir.join("perf.data");
    record(
        &data,
        &["-e", "cpu-clock", "-c", "50000", "-g"],
        &[&alpha, &beta],
    );
    let (n, lines) = compare(&data);
    assert!(n > 100, "only {n} samples");
    assert_eq!(lines, 0);
    // The filter's caches must not name beta's code after alpha: both names appear,
    // at one and the same address.
    let d = dlfilter_path(&data);
    let ips = |name: &str| -> std::collections::HashSet<String> {
        d.events
            .iter()
            // Frames are `IP SYM+OFF (DSO)`, between `[`, ` / ` and `]`.
            .flat_map(|e| e.split(['[', '/']))
            .filter(|f| f.contains(name))
            .filter_map(|f| f.split_whitespace().next().map(String::from))
            .collect()
    };
    let (a, b) = (ips("hot_alpha+"), ips("hot_beta+"));
    assert!(!a.is_empty() && !b.is_empty(), "alpha {a:?} beta {b:?}");
    assert!(
        a.intersection(&b).next().is_some(),
        "alpha {a:?} beta {b:?}"
    );

    // With an extra perf option the reader does not pass `early`: the filter works
    // after perf's own lookup, still trusting its caches between side-band events.
    let mut o = DlfilterOptions::new(&data);
    o.kind = Some(RecordingKind::Sampling);
    o.extra_args = vec!["--ns".into()];
    let mut s = DlfilterScript::spawn(&o).expect("perf script --dlfilter");
    let mut late = Vec::new();
    while let Some(e) = s.next_event().expect("dlfilter decode") {
        late.push(e);
    }
    s.finish().expect("perf exit");
    let strings = s.into_strings();
    let late: Vec<String> = late.iter().map(|e| norm(e, &strings)).collect();
    assert_eq!(late, d.events, "late callback");

    // Run by hand (no `sideband`), the filter checks every sample's address instead.
    let so = install_filter().expect("install filter");
    let mut child = std::process::Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(&data)
        .args(RecordingKind::Sampling.script_args())
        .arg("--dlfilter")
        .arg(so.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("perf script");
    let out = child.stdout.take().expect("piped stdout");
    let mut r = RecordReader::new(std::io::BufReader::new(out));
    let mut by_hand = Vec::new();
    while let Some(e) = r.next_event().expect("stream decodes") {
        by_hand.push(norm(&e, r.strings()));
    }
    assert!(child.wait().expect("perf exits").success());
    assert_eq!(by_hand, d.events, "filter without side-band events");
}

/// Named threads and a rename: both paths give the same names at the same times.
const THREADS_C: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
__attribute__((noinline)) long spin(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s += i; return s; }
static void *body(void *arg) {
  long i = (long)arg; char name[16]; snprintf(name, sizeof name, "worker-%ld", i);
  pthread_setname_np(pthread_self(), name);
  long t = spin(20000000);
  if (i == 0) { pthread_setname_np(pthread_self(), "renamed: 0"); t += spin(20000000); }
  return (void *)t;
}
int main(void) {
  pthread_t th[3];
  for (long i = 0; i < 3; i++) pthread_create(&th[i], 0, body, (void *)i);
  for (int i = 0; i < 3; i++) pthread_join(th[i], 0);
  return 0;
}
"#;

#[test]
fn thread_names_and_renames() {
    if !perf_usable("thread_names_and_renames") {
        return;
    }
    let tmp = scratch("names");
    let dir = tmp.path();
    let src = dir.join("threads.c");
    std::fs::write(&src, THREADS_C).expect("write source");
    let exe = dir.join("threads");
    let st = std::process::Command::new("gcc")
        .args(["-O1", "-pthread", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(st.success(), "gcc failed");
    let data = dir.join("perf.data");
    record(
        &data,
        &["-e", "cpu-clock", "-c", "100000", "-g"],
        &[&exe.to_string_lossy()],
    );
    let (n, lines) = compare(&data);
    assert!(n > 20, "only {n} events");
    assert_eq!(lines, 0);
    let d = dlfilter_path(&data);
    let comms: Vec<&String> = d.events.iter().filter(|e| e.contains(" COMM ")).collect();
    for name in [
        "\"threads\" exec=true",
        "\"worker-1\" exec=false",
        "\"worker-2\" exec=false",
        "\"renamed: 0\" exec=false",
    ] {
        assert!(comms.iter().any(|c| c.contains(name)), "{name}: {comms:?}");
    }
    assert!(d.events.iter().any(|e| e.contains(" FORK from ")));
}

/// Sleeps between two busy loops, so its thread leaves the CPU for a long while.
const SLEEP_C: &str = r#"
#include <unistd.h>
__attribute__((noinline)) long spin(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s += i; return s; }
int main(void) { long t = spin(30000000); usleep(200000); t += spin(30000000); return (int)(t & 1); }
"#;

/// `--switch-events`: both paths give the same switches at the same times (the
/// dlfilter path hands perf's `PERF_RECORD_SWITCH` lines to the text decoder), and the
/// same trace, with the sleep shown off CPU.
#[test]
fn context_switches() {
    if !perf_usable("context_switches") {
        return;
    }
    let tmp = scratch("switch");
    let dir = tmp.path();
    let src = dir.join("sleep.c");
    std::fs::write(&src, SLEEP_C).expect("write source");
    let exe = dir.join("sleep");
    let st = std::process::Command::new("gcc")
        .args(["-O1", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(st.success(), "gcc failed");
    let data = dir.join("perf.data");
    record(
        &data,
        &["-e", "cpu-clock", "-c", "100000", "-g", "--switch-events"],
        &[&exe.to_string_lossy()],
    );
    let (n, lines) = compare(&data);
    assert!(n > 20, "only {n} events");
    assert_eq!(lines, 0);
    let d = dlfilter_path(&data);
    let count = |s: &str| d.events.iter().filter(|e| e.contains(s)).count();
    assert!(
        count("SWITCH out=true preempt=false") >= 1,
        "{:?}",
        d.events
    );
    assert!(count("SWITCH out=false") >= 1, "{:?}", d.events);
    assert!(d.transcript.contains("BEGIN [off-cpu]"), "{}", d.transcript);
}
