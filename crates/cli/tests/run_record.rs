//! `ptscope run` / `ptscope attach` end to end on this machine: real perf, real programs built
//! here, real breakpoints. Needs root and a working perf; skips loudly otherwise (fails in CI).

#[path = "../../../tests/executable.rs"]
mod executable;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "common/perf_env.rs"]
mod perf_env;
use perf_env::*;

const C_DEMO: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include "ptscope.h"
__attribute__((noinline)) long demo_leaf(long x) { volatile long s = 0; for (long i = 0; i < x; i++) s += i; return s; }
__attribute__((noinline)) long demo_function(long x) { return demo_leaf(x) + 1; }
__attribute__((noinline)) long demo_after(long x) { return demo_leaf(x) * 2; }
int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "short";
  long t = 0;
  if (mode[0] == 'l') { for (;;) t += demo_function(200000); }          /* loop forever */
  if (mode[0] == 'c') { t += demo_function(2000000); raise(SIGSEGV); }  /* crash */
  uint64_t start = ptscope_now();
  for (int i = 0; i < 20; i++) t += demo_leaf(4000000);
  if (mode[0] == 'i') ptscope_stop_indicator_with(start, 42);          /* indicator */
  t += demo_function(400000);
  for (int i = 0; i < 20; i++) t += demo_after(4000000);
  printf("%ld\n", t);
  return 0;
}
"#;

const RUST_DEMO: &str = r#"
#[inline(never)]
fn rust_demo_leaf(x: u64) -> u64 { let mut s = 0u64; for i in 0..x { s = std::hint::black_box(s + i); } s }
#[inline(never)]
fn rust_demo_function(x: u64) -> u64 { rust_demo_leaf(x) + 1 }
fn main() { let mut t = 0; for _ in 0..40 { t += rust_demo_function(4_000_000); } println!("{t}"); }
"#;

fn ptscope() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ptscope"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fresh private directory for one test, removed when dropped (also when the test fails).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("ptscope-runtest-{name}-"))
        .tempdir()
        .expect("temporary directory")
}

/// A child process killed and reaped when dropped, so a failing test leaves nothing running.
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        if self.0.try_wait().is_ok_and(|s| s.is_none()) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

fn build_c(dir: &Path) -> PathBuf {
    let src = dir.join("demo.c");
    std::fs::write(&src, C_DEMO).unwrap();
    let exe = dir.join("demo");
    let st = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-I"])
        .arg(repo().join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("gcc");
    assert!(st.success());
    exe
}

fn build_rust(dir: &Path) -> PathBuf {
    let src = dir.join("rdemo.rs");
    std::fs::write(&src, RUST_DEMO).unwrap();
    let exe = dir.join("rdemo");
    let st = Command::new("rustc")
        .args(["-O", "-g", "-C", "force-frame-pointers=yes", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("rustc");
    assert!(st.success());
    exe
}

fn run(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(ptscope())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Runs ptscope with `TMPDIR` pointing at `tmp`.
fn run_with_tmpdir(tmp: &Path, args: &[&std::ffi::OsStr]) -> Output {
    Command::new(ptscope())
        .args(args)
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn read_trace(path: &Path) -> ptscope_fxt::check::Report {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_end(&mut raw)
        .unwrap();
    let r = ptscope_fxt::check::validate_bytes(&raw);
    assert!(r.is_ok(), "{r}");
    r
}

/// No process mentions `needle` in its command line (perf, the demo): nothing left running.
/// Processes being killed may take a while to go on a loaded machine: up to 60 s.
fn assert_nothing_running(needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|p| {
                let c = std::fs::read(format!("/proc/{p}/cmdline")).ok()?;
                let c = String::from_utf8_lossy(&c).replace('\0', " ");
                c.contains(needle).then_some(format!("{p}: {c}"))
            })
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "still running: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

#[test]
fn run_c_and_rust_demos_fall_back_to_sampling() {
    if !perf_usable("run/attach tests") {
        return;
    }
    let tmp = scratch("demos");
    let d = tmp.path();
    let c = build_c(d);
    let r = build_rust(d);
    let out = d.join("c.fxt.gz");
    let o = run(&[
        os("run"),
        os("--timer-resolution"),
        os("low"),
        os("-o"),
        out.as_os_str(),
        os("--"),
        c.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("sampling with cpu-clock"),
        "{}",
        stderr(&o)
    );
    // The fallback points at the exact alternative.
    assert!(stderr(&o).contains("--backend emulate"), "{}", stderr(&o));
    let t = read_trace(&out);
    assert!(
        t.count("demo_leaf") + t.count("demo_after") > 0,
        "{:?}",
        t.names
    );
    let out = d.join("r.fxt.gz");
    // ptscope's working files go under TMPDIR: a fresh one must be left empty.
    let tmp = d.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let o = run_with_tmpdir(
        &tmp,
        &[
            os("run"),
            os("--timer-resolution"),
            os("low"),
            os("--callgraph"),
            os("fp"),
            os("-o"),
            out.as_os_str(),
            os("--"),
            r.as_os_str(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let t = read_trace(&out);
    assert!(
        t.names.keys().any(|n| n.contains("rust_demo_leaf")),
        "{:?}",
        t.names
    );
    assert_nothing_running(d.to_str().unwrap());
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");
}

/// The hit slice is there and the demo's samples end at it.
fn check_trigger(trigger: &str, mode: &str, hit_name: &str) {
    let tmp = scratch(&format!("trigger-{}", hit_name.len()));
    let d = tmp.path();
    let c = build_c(d);
    let out = d.join("t.fxt.gz");
    let w = d.join("w");
    let o = run(&[
        os("run"),
        os("--trigger"),
        os(trigger),
        os("--timer-resolution"),
        os("low"),
        os("--callgraph"),
        os("fp"),
        os("-w"),
        w.as_os_str(),
        os("-o"),
        out.as_os_str(),
        os("--"),
        c.as_os_str(),
        os(mode),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = read_trace(&out);
    let hit = format!("hit {hit_name}");
    assert_eq!(t.count(&hit), 1, "{:?}\n{}", t.names, stderr(&o));
    let hits_thread = t
        .threads
        .keys()
        .find(|k| {
            t.processes
                .get(&k.0)
                .is_some_and(|p| p == "Snapshot symbol hits")
        })
        .copied()
        .expect("hits track");
    let hit_time = t.threads[&hits_thread].last_timestamp.unwrap();
    let last_sample = t
        .threads
        .iter()
        .filter(|(k, _)| **k != hits_thread)
        .filter_map(|(_, s)| s.last_timestamp)
        .max()
        .unwrap();
    let tps = t.ticks_per_second.unwrap_or(1_000_000_000) as f64;
    let after_ms = (last_sample as f64 - hit_time as f64) / tps * 1e3;
    assert!(
        after_ms < 5.0,
        "the trace goes on {after_ms} ms after the hit"
    );
    // The kept working directory decodes the same way later, hits included.
    let again = d.join("again.fxt.gz");
    let o = run(&[
        os("decode"),
        w.as_os_str(),
        os("-o"),
        again.as_os_str(),
        os("--quiet"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(read_trace(&again).count(&hit), 1);
    assert!(!w.join("ctl.fifo").exists() && !w.join("ack.fifo").exists());
    assert_nothing_running(d.to_str().unwrap());
}

#[test]
fn trigger_on_a_function_ends_the_trace_there() {
    if perf_usable("run/attach tests") {
        check_trigger("demo_function", "short", "demo_function");
    }
}

#[test]
fn trigger_on_the_stop_indicator() {
    if perf_usable("run/attach tests") {
        check_trigger(".", "indicator", "ptscope_stop_indicator_with");
    }
}

#[test]
fn attach_until_sigint() {
    if !perf_usable("run/attach tests") {
        return;
    }
    let tmp = scratch("attach");
    let d = tmp.path();
    let c = build_c(d);
    let mut demo = Reap(Command::new(&c).arg("loop").spawn().unwrap());
    let out = d.join("a.fxt.gz");
    let mut p = Reap(
        Command::new(ptscope())
            .args([
                "attach",
                "--timer-resolution",
                "low",
                "--callgraph",
                "fp",
                "-p",
            ])
            .arg(demo.0.id().to_string())
            .arg("-o")
            .arg(&out)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Ctrl-C once perf is recording (ptscope says so) and the demo has run 0.3 s of CPU
    // (30 ticks at the usual 100 Hz) since.
    let mut err = p.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 1024];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
            if String::from_utf8_lossy(&all).contains("Ctrl-C to stop") {
                let _ = tx.send(());
            }
        }
        String::from_utf8_lossy(&all).into_owned()
    });
    let ready = rx.recv_timeout(Duration::from_secs(120)).is_ok();
    if ready {
        wait_for_cpu(demo.0.id(), 30);
    }
    unsafe_kill(p.0.id(), 2);
    let status = p.0.wait().unwrap();
    let err = reader.join().unwrap();
    assert!(ready, "ptscope never said it was recording: {err}");
    assert!(status.success(), "{err}");
    let t = read_trace(&out);
    assert!(t.count("demo_leaf") > 0, "{:?}", t.names);
    // Attaching does not harm the process.
    assert!(demo.0.try_wait().unwrap().is_none(), "the demo died");
    drop(demo);
    assert_nothing_running(d.to_str().unwrap());
}

fn unsafe_kill(pid: u32, sig: i32) {
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
}

#[test]
fn failures_are_clear_and_leave_nothing_behind() {
    if !perf_usable("run/attach tests") {
        return;
    }
    let tmp = scratch("fail");
    let d = tmp.path();
    let c = build_c(d);
    let w = d.join("w");
    // A symbol that does not exist, with a suggestion.
    let o = run(&[
        os("run"),
        os("--trigger"),
        os("demo_functon"),
        os("-w"),
        w.as_os_str(),
        os("--"),
        c.as_os_str(),
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("did you mean `demo_function`"),
        "{}",
        stderr(&o)
    );
    // A bad pid.
    let o = run(&[os("attach"), os("-p"), os("999999999")]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no process with pid 999999999"),
        "{}",
        stderr(&o)
    );
    // A program that does not exist.
    let o = run(&[os("run"), os("--"), os("/nonexistent/prog")]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no such program"), "{}", stderr(&o));
    // --backend pt without PT says why and what to use.
    if !Path::new("/sys/bus/event_source/devices/intel_pt").exists() {
        let o = run(&[
            os("run"),
            os("--backend"),
            os("pt"),
            os("--"),
            c.as_os_str(),
        ]);
        assert!(!o.status.success());
        assert!(
            stderr(&o).contains("use --backend sample"),
            "{}",
            stderr(&o)
        );
    }
    // The program crashes: a clear message, and the trace of its last moments.
    let out = d.join("crash.fxt.gz");
    let o = run(&[
        os("run"),
        os("--timer-resolution"),
        os("low"),
        os("--callgraph"),
        os("fp"),
        os("-o"),
        out.as_os_str(),
        os("--"),
        c.as_os_str(),
        os("crash"),
    ]);
    assert!(
        stderr(&o).contains("killed by signal 11 (SIGSEGV)"),
        "{}",
        stderr(&o)
    );
    assert!(read_trace(&out).count("demo_leaf") > 0);
    // perf is killed while recording.
    let fake = d.join("perf-killed");
    executable::write_executable(
        &fake,
        "#!/bin/sh\n[ \"$1\" = --version ] && exec perf --version\nperf \"$@\" &\nP=$!\nsleep 3\nkill -9 $P\nwait $P\nexit 137\n",
    );
    let killed = d.join("killed.fxt.gz");
    let o = run(&[
        os("run"),
        os("--perf"),
        fake.as_os_str(),
        os("-w"),
        w.as_os_str(),
        os("-o"),
        killed.as_os_str(),
        os("--"),
        c.as_os_str(),
        os("loop"),
    ]);
    assert!(!o.status.success());
    assert!(
        (stderr(&o).contains("perf stopped while the program was still running")
            || stderr(&o).contains("perf could not start recording")),
        "{}",
        stderr(&o)
    );
    // No permission: an unprivileged user attaching to a root process.
    let has_setpriv = Command::new("setpriv").arg("--version").output().is_ok();
    if !has_setpriv {
        assert!(
            std::env::var_os("CI").is_none(),
            "setpriv is required under CI"
        );
        eprintln!("!!!!!!!! SKIPPED the permission check: setpriv (util-linux) not found");
    } else {
        // The user cannot enter a private TMPDIR (scripts/test sets one): the system's.
        let o = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(ptscope())
            .args(["attach", "-p", "1", "-o", "-"])
            .env_remove("TMPDIR")
            .output()
            .unwrap();
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains("no permission") || e.contains("root"), "{e}");
    }
    assert!(!w.join("ctl.fifo").exists() && !w.join("ack.fifo").exists());
    assert_nothing_running(d.to_str().unwrap());
}
