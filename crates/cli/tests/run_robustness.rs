//! `ptscope run`/`decode` when the world misbehaves: interrupts at any moment, a program
//! that aborts, perf dying mid-way, an output that cannot be written, shared directories.
//! Real perf, real programs; each test names the defect of issue 11 it holds fixed.
//! Needs root and a working perf; skips loudly otherwise (fails under CI).

#[path = "../../../tests/executable.rs"]
mod executable;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

#[path = "common/perf_env.rs"]
mod perf_env;
use perf_env::*;

/// Loops forever in `spin_work` under `main`; `abort` after N iterations when asked.
const SPIN: &str = r#"
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
static volatile unsigned long s;
__attribute__((noinline)) void spin_work(long k) { for (long i = 0; i < 200000; i++) s += i * k; }
int main(int argc, char **argv) {
  long stop = argc > 1 ? atol(argv[1]) : -1;
  if (argc > 2) { FILE *f = fopen(argv[2], "w"); if (f) fclose(f); }
  for (long k = 0; stop < 0 || k < stop; k++) spin_work(k);
  abort();
}
"#;

fn ptscope() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ptscope"))
}

fn build_spin(dir: &Path) -> PathBuf {
    build_c(dir, "spin", SPIN, &[])
}

/// A ptscope started with its stderr read line by line on a thread.
struct Running {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Running {
    fn start(cmd: &mut Command) -> Running {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ptscope");
        let err = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// Waits for a stderr line containing `what`.
    fn wait_for(&mut self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(l) = self.lines.recv_timeout(Duration::from_millis(100)) {
                let hit = l.contains(what);
                self.seen.push(l);
                if hit {
                    return;
                }
            }
        }
        panic!(
            "ptscope never printed `{what}`; it said:\n{}",
            self.seen.join("\n")
        );
    }

    fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Waits for exit; returns the status code and everything it printed.
    fn finish(mut self) -> (Option<i32>, String) {
        let deadline = Instant::now() + Duration::from_secs(240);
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            assert!(Instant::now() < deadline, "ptscope did not exit");
            std::thread::sleep(Duration::from_millis(20));
        };
        while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.seen.push(l);
        }
        (status.code(), self.seen.join("\n"))
    }
}

/// The FXT checker's verdict on a (gzipped) trace, and its slice count.
fn check_trace(path: &Path) -> ptscope_fxt::check::Report {
    let raw = std::fs::read(path).expect("read trace");
    let mut bytes = Vec::new();
    flate2::read::MultiGzDecoder::new(&raw[..])
        .read_to_end(&mut bytes)
        .expect("gunzip");
    let r = ptscope_fxt::check::validate_bytes(&bytes);
    assert!(r.is_ok(), "{}: {r}", path.display());
    r
}

/// The directory ptscope says it kept the recording in, if it said so.
fn kept_dir(stderr: &str) -> Option<PathBuf> {
    let rest = stderr.split("the recording is kept in ").nth(1)?;
    let dir = rest.split(';').next()?;
    Some(PathBuf::from(dir.trim()))
}

fn ls(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn decode_dir(dir: &Path, out: &Path) -> Output {
    Command::new(ptscope())
        .arg("decode")
        .arg(dir)
        .arg("-o")
        .arg(out)
        .stdin(Stdio::null())
        .output()
        .expect("decode")
}

/// Defect 4: two Ctrl-Cs 20–50 ms apart discarded everything in 9 of 26 runs. Now the
/// first stops recording, the second stops decoding: a trace of what was decoded is
/// written, or, when nothing was decoded yet, the recording is kept and named.
#[test]
fn two_quick_interrupts_never_lose_the_recording() {
    if !perf_usable("run robustness tests") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let spin = build_spin(d.path());
    let tmp = tempfile::tempdir().unwrap();
    for (i, gap) in [20u64, 30, 40, 50].into_iter().enumerate() {
        let out = d.path().join(format!("t{i}.fxt.gz"));
        let mut r = Running::start(
            Command::new(ptscope())
                .env("TMPDIR", tmp.path())
                .args(["run", "--callgraph", "fp", "-o"])
                .arg(&out)
                .arg("--")
                .arg(&spin),
        );
        r.wait_for("Ctrl-C to stop");
        std::thread::sleep(Duration::from_millis(300));
        r.signal(libc::SIGINT);
        std::thread::sleep(Duration::from_millis(gap));
        r.signal(libc::SIGINT);
        let (code, err) = r.finish();
        assert!(!err.contains("panicked"), "{err}");
        if out.exists() {
            check_trace(&out);
            assert_ne!(code, Some(0), "an interrupted decode must say so: {err}");
            // A decode cut short keeps its recording too, for a whole decode later.
            if err.contains("decoding was interrupted") {
                let kept = kept_dir(&err).unwrap_or_else(|| panic!("nothing kept: {err}"));
                assert!(
                    ls(&kept).iter().any(|f| f.starts_with("perf.data")),
                    "{err}"
                );
                std::fs::remove_dir_all(&kept).unwrap();
            }
        } else {
            let kept = kept_dir(&err).unwrap_or_else(|| panic!("nothing kept: {err}"));
            assert!(
                ls(&kept).iter().any(|f| f.starts_with("perf.data")),
                "{err}"
            );
            let again = d.path().join(format!("again{i}.fxt.gz"));
            let o = decode_dir(&kept, &again);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            check_trace(&again);
            std::fs::remove_dir_all(&kept).unwrap();
        }
        // Nothing half-written at -o, nothing else in TMPDIR.
        assert!(
            !out.exists() || std::fs::metadata(&out).unwrap().len() > 0,
            "empty trace at -o"
        );
        assert_eq!(
            ls(tmp.path()),
            Vec::<String>::new(),
            "left in TMPDIR: {err}"
        );
    }
}

/// Defect 4: only a third interrupt quits, and it keeps the recording and names the
/// command that decodes it. The stand-in perf's `perf script` leaves a process holding
/// its output open, so the second press (stop decoding) cannot finish: the case a third
/// press is for.
#[test]
fn a_third_interrupt_quits_and_keeps_the_recording() {
    if !perf_usable("run robustness tests") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let spin = build_spin(d.path());
    let tmp = tempfile::tempdir().unwrap();
    let mark = d.path().join("script-started");
    let wrapper = d.path().join("stuck-perf");
    executable::write_executable(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = script ]; then sleep 60 & echo $! > {}; wait; fi\nexec perf \"$@\"\n",
            mark.display()
        ),
    );
    let out = d.path().join("t.fxt.gz");
    let mut r = Running::start(
        Command::new(ptscope())
            .env("TMPDIR", tmp.path())
            .args(["run", "--decoder", "text", "--callgraph", "fp", "--perf"])
            .arg(&wrapper)
            .arg("-o")
            .arg(&out)
            .arg("--")
            .arg(&spin),
    );
    r.wait_for("Ctrl-C to stop");
    std::thread::sleep(Duration::from_millis(300));
    r.signal(libc::SIGINT);
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&mark).map_or(true, |s| s.trim().is_empty()) {
        assert!(Instant::now() < deadline, "perf script never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    r.signal(libc::SIGINT);
    r.wait_for("writing what was decoded");
    std::thread::sleep(Duration::from_millis(200));
    r.signal(libc::SIGINT);
    let (code, err) = r.finish();
    if let Ok(pid) = std::fs::read_to_string(&mark)
        .unwrap_or_default()
        .trim()
        .parse::<i32>()
    {
        // SAFETY: plain kill(2) of the stand-in's leftover sleep.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("ptscope decode "), "{err}");
    let kept = kept_dir(&err).unwrap_or_else(|| panic!("no directory named: {err}"));
    assert!(kept.starts_with(tmp.path()), "{err}");
    assert!(!out.exists(), "a trace appeared although ptscope quit");
    let again = d.path().join("again.fxt.gz");
    let o = decode_dir(&kept, &again);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(check_trace(&again).count("spin_work") > 0);
    std::fs::remove_dir_all(&kept).unwrap();
}

/// Defect 4: SIGTERM and SIGHUP act like Ctrl-C: recording stops, the trace is written.
#[test]
fn sigterm_and_sighup_stop_the_recording_like_ctrl_c() {
    if !perf_usable("run robustness tests") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let spin = build_spin(d.path());
    for sig in [libc::SIGTERM, libc::SIGHUP] {
        let out = d.path().join(format!("t{sig}.fxt.gz"));
        let mut r = Running::start(
            Command::new(ptscope())
                .args(["run", "--callgraph", "fp", "-o"])
                .arg(&out)
                .arg("--")
                .arg(&spin),
        );
        r.wait_for("Ctrl-C to stop");
        std::thread::sleep(Duration::from_millis(500));
        r.signal(sig);
        let (code, err) = r.finish();
        // The signal was sent to ptscope alone, so it is passed on to the program, whose
        // death by it becomes ptscope's status (128 + N).
        assert_eq!(code, Some(128 + sig), "{err}");
        assert!(check_trace(&out).count("spin_work") > 0, "{err}");
    }
}

/// Defect 5: a program that aborts could be seen to end after perf did, and ptscope
/// said "perf stopped while recording … no trace was written" and deleted the samples.
/// Defect 10: after a crash `ptscope run` exits non-zero (the program's status).
#[test]
fn an_aborting_program_keeps_its_trace_and_its_status() {
    if !perf_usable("run robustness tests") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let spin = build_spin(d.path());
    for i in 0..5 {
        let out = d.path().join(format!("abort{i}.fxt.gz"));
        let o = Command::new(ptscope())
            .args(["run", "--callgraph", "fp", "-o"])
            .arg(&out)
            .arg("--")
            .arg(&spin)
            .arg("300")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(128 + libc::SIGABRT), "{err}");
        assert!(!err.contains("no trace was written"), "{err}");
        assert!(err.contains("SIGABRT"), "{err}");
        assert!(check_trace(&out).count("spin_work") > 0, "{err}");
    }
}

/// Defect 7: `-o` into a missing directory failed only after the program had run.
#[test]
fn an_unwritable_output_fails_before_the_program_runs() {
    let d = tempfile::tempdir().unwrap();
    let marker = d.path().join("ran");
    let o = Command::new(ptscope())
        .args(["run", "-o"])
        .arg(d.path().join("missing/dir/t.fxt.gz"))
        .args(["--", "touch"])
        .arg(&marker)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("does not exist"), "{err}");
    assert!(err.contains("nothing was recorded"), "{err}");
    assert!(
        !marker.exists(),
        "the program ran although the trace could not be written"
    );
}

/// A recording of `spin` in a kept working directory, for the decode tests.
fn recording(d: &Path) -> PathBuf {
    let spin = build_spin(d);
    let rec = d.join("rec");
    let o = Command::new(ptscope())
        // One whole perf.data (sampling otherwise rotates perf.data.TIMESTAMP files).
        .args([
            "run",
            "--no-decode",
            "--full-execution",
            "--callgraph",
            "fp",
            "-w",
        ])
        .arg(&rec)
        .arg("--")
        .arg(&spin)
        .arg("3000")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        rec.join("perf.data").exists(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    rec
}

/// Defect 8: `perf script` dying mid-way gave a truncated trace, exit 0 and no word.
/// A stand-in perf runs the real one and is killed after part of its output.
#[test]
fn perf_dying_mid_decode_is_reported_and_exits_non_zero() {
    if !perf_usable("run robustness tests") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let rec = recording(d.path());
    let wrapper = d.path().join("dying-perf");
    executable::write_executable(
        &wrapper,
        "#!/bin/sh\n# Real perf, but `perf script` dies after 60 kB of output.\n\
         if [ \"$1\" = script ]; then perf \"$@\" | head -c 60000; kill -9 $$; fi\nexec perf \"$@\"\n",
    );
    for decoder in ["text", "dlfilter"] {
        let out = d.path().join(format!("{decoder}.fxt.gz"));
        let o = Command::new(ptscope())
            .args(["decode", "--decoder", decoder, "--perf"])
            .arg(&wrapper)
            .arg(&rec)
            .arg("-o")
            .arg(&out)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{decoder}: {err}");
        assert!(err.contains("the trace is incomplete"), "{decoder}: {err}");
        // What was decoded before is written all the same.
        assert!(check_trace(&out).count("spin_work") > 0, "{decoder}: {err}");
    }
}

/// Defect 10: `-q` silences progress and information; warnings would still show.
#[test]
fn quiet_prints_nothing_when_all_is_well() {
    if !perf_usable("run robustness tests") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let rec = recording(d.path());
    let out = d.path().join("q.fxt.gz");
    let o = Command::new(ptscope())
        .args(["decode", "-q"])
        .arg(&rec)
        .arg("-o")
        .arg(&out)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stderr), "");
    check_trace(&out);
}

/// Defect 10: causes were printed twice ("(os error 2): No such file or directory (os
/// error 2)"), and "the input is empty" was said of inputs that were not.
#[test]
fn messages_say_each_cause_once_and_empty_only_when_empty() {
    if !perf_usable("run robustness tests") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let rec = recording(d.path());
    let o = Command::new(ptscope())
        .args(["decode", "--perf", "/nonexistent/perf"])
        .arg(&rec)
        .arg("-o")
        .arg(d.path().join("x.fxt.gz"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");

    // A recording of a program too short to be sampled holds no samples, but is not empty.
    let short = d.path().join("short.data");
    let st = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-o"])
        .arg(&short)
        .args(["--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let o = Command::new(ptscope())
        .arg("decode")
        .arg(&short)
        .arg("-o")
        .arg(d.path().join("short.fxt.gz"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() {
        assert!(!err.contains("the input is empty"), "{err}");
        assert!(err.contains("no samples"), "{err}");
    }
    let empty = d.path().join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let o = Command::new(ptscope())
        .args(["decode", "--perf-script"])
        .arg(&empty)
        .arg("-o")
        .arg(d.path().join("e.fxt.gz"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("the input is empty"));
}

/// `run` takes `--decoder` too, and both decoders give the same trace of one recording.
#[test]
fn run_takes_the_decoder_choice() {
    if !perf_usable("run robustness tests") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let spin = build_spin(d.path());
    let out = d.path().join("text.fxt.gz");
    let o = Command::new(ptscope())
        .args(["run", "--decoder", "text", "--callgraph", "fp", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&spin)
        .arg("2000")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(128 + libc::SIGABRT), "{err}");
    assert!(check_trace(&out).count("spin_work") > 0, "{err}");
}

/// Defect 2 (`run -w DIR`): a working directory others can write is refused, and a
/// symlink planted as `perf.log` is replaced, never followed.
#[test]
fn working_directories_must_be_private_and_links_are_not_followed() {
    if !perf_usable("run robustness tests") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let shared = d.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let o = Command::new(ptscope())
        .args(["run", "-o"])
        .arg(d.path().join("t.fxt.gz"))
        .arg("-w")
        .arg(&shared)
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("writable by other users"), "{err}");
    assert!(ls(&shared).is_empty());

    let private = d.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, private.join("perf.log")).unwrap();
    let spin = build_spin(d.path());
    let o = Command::new(ptscope())
        .args(["run", "--no-decode", "--callgraph", "fp", "-w"])
        .arg(&private)
        .arg("--")
        .arg(&spin)
        .arg("100")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious",
        "{err}"
    );
    assert!(
        !std::fs::symlink_metadata(private.join("perf.log"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "{err}"
    );
}
