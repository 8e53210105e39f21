//! The perf runner, end to end: a real `perf record` of a small C program on this
//! machine, and a fake perf for the failure paths.

#[path = "../../../tests/executable.rs"]
mod executable;
use ptscope_decode::{Error, PerfError, PerfScript, PerfScriptOptions, RecordingKind};
use ptscope_event::{Event, EventData};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A private temporary directory, removed on drop (also when the test fails).
fn temp_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("ptscope-decode-{tag}-"))
        .tempdir()
        .expect("create temp dir")
}

fn have(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Skips (returns false) when a tool is missing, except under CI where it must exist.
fn require_tools() -> bool {
    let missing: Vec<&str> = [("perf", "--version"), ("cc", "--version")]
        .into_iter()
        .filter(|(p, a)| !have(p, a))
        .map(|(p, _)| p)
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but {missing:?} is missing"
    );
    eprintln!("skipping: {missing:?} not installed");
    false
}

// -O0: gcc drops the frame pointer of leaf functions when optimising, which hides
// the caller of the leaf from frame-pointer unwinding.
const PROGRAM: &str = r#"
#include <stdio.h>
volatile double sink;
__attribute__((noinline)) double ptscope_e2e_leaf(int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += i * 0.5;
    return s;
}
__attribute__((noinline)) double ptscope_e2e_middle(int n) {
    double r = ptscope_e2e_leaf(n);
    sink = r;
    return r + 1;
}
int main(void) {
    double t = 0;
    for (int i = 0; i < 400; i++) t += ptscope_e2e_middle(400000);
    printf("%f\n", t);
    return 0;
}
"#;

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn real_perf_cpu_clock_samples_name_the_program_functions() {
    if !require_tools() {
        return;
    }
    let dir = temp_dir("e2e");
    let src = dir.path().join("prog.c");
    let prog = dir.path().join("prog");
    let data = dir.path().join("perf.data");
    std::fs::write(&src, PROGRAM).expect("write source");
    run(Command::new("cc")
        .args(["-O0", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&prog)
        .arg(&src));
    run(Command::new("perf")
        .args([
            "record",
            "--no-buildid-cache",
            "-q",
            "-e",
            "cpu-clock",
            "-g",
            "-o",
        ])
        .arg(&data)
        .arg("--")
        .arg(&prog));

    let mut script = PerfScript::spawn(&PerfScriptOptions::new(&data)).expect("spawn perf");
    assert_eq!(script.kind(), RecordingKind::Sampling);
    let mut samples = 0;
    let mut leaf_under_middle = 0;
    let mut execs = Vec::new();
    while let Some(event) = script.next_event().expect("read") {
        if let Event::Ok {
            data: EventData::Comm { name, exec: true },
            thread,
            ..
        } = event
        {
            execs.push((thread, script.strings().get(name).to_string()));
            continue;
        }
        if event.is_task() {
            continue;
        }
        let Event::Ok {
            data: EventData::StackSample { callstack },
            thread,
            ..
        } = event
        else {
            panic!("unexpected {event:?}");
        };
        samples += 1;
        assert!(thread.pid.is_some());
        let names: Vec<&str> = (script.strings().stack(callstack))
            .map(|l| script.strings().display(l.symbol))
            .collect();
        let pos = |f: &str| names.iter().position(|n| *n == f);
        if let (Some(m), Some(l)) = (pos("ptscope_e2e_middle"), pos("ptscope_e2e_leaf")) {
            // Root first: the caller comes before the callee, main before both.
            assert!(m < l, "{names:?}");
            assert!(pos("main").is_some_and(|x| x < m), "{names:?}");
            leaf_under_middle += 1;
        }
    }
    script.finish().expect("perf script succeeded");
    let d = script.decoder();
    assert_eq!(d.stats().warnings, 0, "{:?}", d.warnings());
    assert!(samples > 20, "only {samples} samples");
    // perf's child exec'd the program: its thread is named after it from then on.
    assert!(
        execs.iter().any(|(t, n)| n == "prog" && t.pid == t.tid),
        "{execs:?}"
    );
    assert!(
        leaf_under_middle * 2 > samples,
        "{leaf_under_middle} of {samples} samples in the leaf"
    );
}

#[test]
fn real_perf_failure_reports_its_stderr() {
    if !require_tools() {
        return;
    }
    let dir = temp_dir("bad");
    let data = dir.path().join("perf.data");
    std::fs::write(&data, b"this is not a perf.data file\n").expect("write");
    // Without a kind, the header is read first: garbage is refused with a clear word.
    let err = PerfScript::spawn(&PerfScriptOptions::new(&data)).expect_err("garbage");
    assert!(err.to_string().contains("is not a perf.data file"), "{err}");

    let mut options = PerfScriptOptions::new(&data);
    options.kind = Some(RecordingKind::Sampling);
    let mut script = PerfScript::spawn(&options).expect("spawn");
    while script.next_event().expect("read").is_some() {}
    let err = script.finish().expect_err("perf script must fail");
    assert!(err.to_string().contains("perf script"), "{err}");
}

/// A stand-in perf: prints two groups, complains on stderr, exits 3.
fn fake_perf(dir: &Path) -> PathBuf {
    let path = dir.join("fake-perf");
    let script = r#"#!/bin/sh
echo "$@" >&2
printf ' 1/1 1.000000001:  1  branches:uH:   call   7f00 a+0x1 (x.so) =>  7f10 b+0x0 (x.so)\n'
printf ' instruction trace error type 1 time 1.000000002 cpu 0 pid 1 tid 1 ip 0 code 8: Lost trace data\n'
echo "decoder gave up" >&2
exit 3
"#;
    executable::write_executable(&path, script);
    path
}

#[test]
fn failing_perf_keeps_events_and_reports_stderr_tail() {
    let dir = temp_dir("fake");
    let mut options = PerfScriptOptions::new(dir.path().join("perf.data"));
    options.perf = fake_perf(dir.path());
    options.kind = Some(RecordingKind::IntelPt);
    let mut script = PerfScript::spawn(&options).expect("spawn");
    assert_eq!(script.kind(), RecordingKind::IntelPt);
    assert!(script.command().contains("--itrace=bep"));
    let mut events = Vec::new();
    while let Some(e) = script.next_event().expect("read") {
        events.push(e);
    }
    assert_eq!(events.len(), 2);
    assert!(matches!(events[1], Event::DecodeError { .. }));
    let err = script.finish().expect_err("exit 3 is a failure");
    let Error::Perf(PerfError::Failed { status, stderr, .. }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(status.code(), Some(3));
    assert!(stderr.contains("decoder gave up"), "{stderr}");
    // The PT field list reached perf.
    assert!(stderr.contains("pid,tid,time,flags,ip,addr,sym,symoff,synth,dso,event,period"));
    assert!(err.to_string().contains("decoder gave up"));
    // Asking again is harmless.
    assert!(script.finish().is_ok());
}

#[test]
fn missing_perf_binary_is_a_spawn_error() {
    let mut options = PerfScriptOptions::new("perf.data");
    options.perf = PathBuf::from("/nonexistent/ptscope-perf");
    options.kind = Some(RecordingKind::Sampling);
    let err = PerfScript::spawn(&options).expect_err("no such binary");
    assert!(
        matches!(err, Error::Perf(PerfError::Spawn { .. })),
        "{err:?}"
    );
}
