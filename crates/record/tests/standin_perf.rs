//! The Intel PT path, which cannot run on machines without PT: a stand-in `perf` that speaks
//! the `--control` fifo protocol (and SIGUSR2) records what it was told, so the snapshot, stop
//! and ack sequence and multi-snapshot are exercised for real.

use ptscope_event::TraceScope;
use ptscope_record::argv::{Backend, TimerResolution};
use ptscope_record::caps::{Capabilities, PerfVersion, PtCaps};
use ptscope_record::session::{record, EndReason, Options, Target};
use ptscope_record::trigger::TriggerSpec;
use std::path::{Path, PathBuf};
use std::process::Command;

const STANDIN: &str = r#"#!/usr/bin/env python3
import os, signal, sys
if sys.argv[1:] == ["--version"]:
    print("perf version 6.1.0"); sys.exit(0)
args = sys.argv[2:]
out = args[args.index("-o") + 1]
ctl, ack = [a for a in args if a.startswith("--control=fifo:")][0].split(":", 1)[1].split(",")
d = os.path.dirname(out)
log = open(os.path.join(d, "standin.log"), "a")
log.write("ARGV " + " ".join(args) + "\n"); log.flush()
n = [0]
def snap(kind):
    n[0] += 1
    open("%s.%d" % (out, n[0]), "w").write("fake %s snapshot\n" % kind)
    log.write("SNAPSHOT %s %d\n" % (kind, n[0])); log.flush()
signal.signal(signal.SIGUSR2, lambda *_: snap("sigusr2"))
c = open(ctl, "r"); a = open(ack, "w")
while True:
    line = c.readline()
    if not line: continue
    cmd = line.strip()
    log.write("CMD " + cmd + "\n"); log.flush()
    if cmd == "snapshot": snap("ctl")
    if cmd == "stop" and "--snapshot=e" in args: snap("exit")
    a.write("ack\n\0"); a.flush()
    if cmd == "stop": sys.exit(0)
"#;

/// Calls the stop indicator `argv[1]` times. With `argv[2]` (the stand-in's output file),
/// each call waits until its snapshot (`argv[2].N`) exists before the next: hits are then
/// seen one at a time however slowly ptscope runs, without a fixed pause. Exit code 3: a
/// snapshot never came (120 s).
const PROGRAM: &str = r#"
#include <stdio.h>
#include <unistd.h>
#include "ptscope.h"
int main(int argc, char **argv) {
  int n = argc > 1 ? argv[1][0] - '0' : 1;
  for (int i = 0; i < n; i++) {
    ptscope_stop_indicator_with(ptscope_now(), i);
    if (argc > 2) {
      char snap[4096];
      snprintf(snap, sizeof snap, "%s.%d", argv[2], i + 1);
      for (int ms = 0; access(snap, F_OK) != 0; ms++) {
        if (ms == 120000) return 3;
        usleep(1000);
      }
    }
  }
  return 0;
}
"#;

fn root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// A private directory (removed when the guard drops, also on failure) with the stand-in
/// perf and the program built in it.
fn setup(name: &str) -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    if !root() || Command::new("python3").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "needs root and python3");
        eprintln!("!!!!!!!! SKIPPED stand-in perf tests: need root (breakpoints) and python3");
        return None;
    }
    let tmp = tempfile::Builder::new()
        .prefix(&format!("ptscope-standin-{name}-"))
        .tempdir()
        .expect("temporary directory");
    let d = tmp.path();
    let perf = d.join("perf");
    std::fs::write(&perf, STANDIN).unwrap();
    Command::new("chmod").arg("+x").arg(&perf).status().unwrap();
    let src = d.join("p.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = d.join("prog");
    let inc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
    assert!(Command::new("gcc")
        .arg("-O1")
        .arg("-I")
        .arg(inc)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap()
        .success());
    Some((tmp, perf, exe))
}

fn options(d: &Path, perf: &Path, argv: Vec<&str>, trigger: Option<TriggerSpec>) -> Options {
    Options {
        perf: perf.to_owned(),
        target: Target::Run(argv.into_iter().map(Into::into).collect()),
        working_dir: d.join("w"),
        backend: Some(Backend::Pt),
        scope: TraceScope::Userspace,
        timer: TimerResolution::Normal,
        single_thread: false,
        multi_snapshot: false,
        full_execution: false,
        snapshot_pages: None,
        snapshot_seconds: None,
        callgraph: None,
        trigger,
        caps: Some(Capabilities {
            perf: perf.to_owned(),
            perf_version: PerfVersion { major: 6, minor: 1 },
            intel_pt: Some(PtCaps {
                psb_cyc: true,
                mtc: true,
            }),
            hardware_pmu: true,
            paranoid: Some(-1),
            max_sample_rate: Some(100_000),
            euid: 0,
            cpu_model: "Intel(R) stand-in".into(),
            sched_switch: false,
        }),
        quiet: true,
        say: None,
    }
}

fn log(d: &Path) -> Vec<String> {
    std::fs::read_to_string(d.join("w/standin.log"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn trigger_snapshots_then_stops() {
    let Some((tmp, perf, exe)) = setup("trigger") else {
        return;
    };
    let d = tmp.path();
    let o = record(&options(
        d,
        &perf,
        vec![exe.to_str().unwrap(), "1"],
        Some(TriggerSpec::StopIndicator),
    ))
    .unwrap();
    assert_eq!(o.ended_by, EndReason::Trigger);
    assert_eq!(o.hits.len(), 1);
    assert_eq!(o.hits[0].passed_value, 0);
    let l = log(d);
    assert!(
        l[0].contains("--event=intel_pt/cyc=1,cyc_thresh=1,mtc_period=0/u -p "),
        "{l:?}"
    );
    assert!(l[0].contains(" --snapshot --control=fifo:"), "{l:?}");
    assert_eq!(
        &l[1..],
        ["CMD ping", "CMD snapshot", "SNAPSHOT ctl 1", "CMD stop"]
    );
    assert_eq!(o.perf_files.len(), 1);
    assert!(o.program_status.unwrap().success());
    assert!(!d.join("w/ctl.fifo").exists() && !d.join("w/ack.fifo").exists());
    assert!(d.join("w/hits.tsv").exists());
}

#[test]
fn no_trigger_snapshots_at_exit() {
    let Some((tmp, perf, exe)) = setup("exit") else {
        return;
    };
    let d = tmp.path();
    let o = record(&options(d, &perf, vec![exe.to_str().unwrap(), "0"], None)).unwrap();
    assert_eq!(o.ended_by, EndReason::ProgramExited);
    let l = log(d);
    assert!(l[0].contains(" --snapshot=e --control=fifo:"), "{l:?}");
    assert_eq!(&l[1..], ["CMD ping", "CMD stop", "SNAPSHOT exit 1"]);
}

#[test]
fn multi_snapshot_takes_one_per_hit() {
    let Some((tmp, perf, exe)) = setup("multi") else {
        return;
    };
    let d = tmp.path();
    let mut opts = options(
        d,
        &perf,
        vec![
            exe.to_str().unwrap(),
            "3",
            d.join("w/perf.data").to_str().unwrap(),
        ],
        Some(TriggerSpec::StopIndicator),
    );
    opts.multi_snapshot = true;
    let o = record(&opts).unwrap();
    assert_eq!(o.ended_by, EndReason::ProgramExited);
    assert!(
        o.program_status.unwrap().success(),
        "the program waited 120 s for a snapshot: {:?}",
        log(d)
    );
    assert_eq!(o.hits.len(), 3);
    assert_eq!(
        o.hits.iter().map(|h| h.passed_value).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    let l = log(d);
    assert!(l[0].contains("--switch-output=signal"), "{l:?}");
    let snaps: Vec<&String> = l
        .iter()
        .filter(|x| x.starts_with("SNAPSHOT sigusr2"))
        .collect();
    assert_eq!(snaps.len(), 3, "{l:?}");
    assert_eq!(o.perf_files.len(), 3);
}
