//! The interactive pickers, driven through a real terminal (`script` allocates a pty):
//! `ptscope attach` without `-p` picks a process, `--trigger ?` picks a function.

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "common/perf_env.rs"]
mod perf_env;
use perf_env::*;

fn usable() -> bool {
    let have = |c: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {c}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let ok = have("perf") && have("cc") && have("script");
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "perf, cc and script are required under CI"
        );
        eprintln!("!!!!!!!! SKIPPING: perf, cc or script (util-linux) not found");
    }
    ok
}

/// With an argument, spins in `pickme_spin` forever and says `spinning` once it is there.
const SPINNER: &str = r#"#include <stdio.h>
volatile unsigned long s;
__attribute__((noinline)) void warm_up(void) { for (unsigned long i = 0; i < 400000000; i++) s += i; }
__attribute__((noinline)) void pickme_spin(void) { for (unsigned long i = 0; i < 100000; i++) s += i; }
int main(int argc, char **argv) {
    warm_up();
    if (argc > 1) { puts("spinning"); fflush(stdout); }
    for (int k = 0; argc > 1 || k < 3000; k++) pickme_spin();
    return 0;
}
"#;

/// A child process killed and reaped when dropped, so a failing test leaves nothing running.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        if self.0.try_wait().is_ok_and(|s| s.is_none()) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

fn build(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("spin.c"), SPINNER).expect("write");
    let exe = dir.join("ptscope_pick_target");
    let o = Command::new("cc")
        .args(["-O1", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(dir.join("spin.c"))
        .output()
        .expect("cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    exe
}

/// One step on the terminal: wait for `text`, then run `then` (which waits for whatever
/// else must be true first), then type `keys`.
struct Step<'a> {
    text: &'a str,
    then: &'a dyn Fn(),
    keys: &'a [u8],
}

/// Runs `cmd` on a pseudo-terminal; for each step waits (up to 120 s) until the output since
/// the previous step contains its text, runs its `then`, then types its keys. Waits for the
/// command to end (up to 120 s) and returns everything printed.
fn on_terminal(cmd: &str, steps: &[Step]) -> String {
    let mut child = Reap(
        Command::new("script")
            .args(["-qfec", cmd, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("script"),
    );
    let seen = Arc::new(Mutex::new(Vec::<u8>::new()));
    let readers: Vec<_> = [
        Box::new(child.0.stdout.take().expect("stdout")) as Box<dyn Read + Send>,
        Box::new(child.0.stderr.take().expect("stderr")),
    ]
    .into_iter()
    .map(|mut r| {
        let seen = Arc::clone(&seen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock().expect("lock").extend_from_slice(&buf[..n]);
            }
        })
    })
    .collect();
    let text =
        |seen: &Mutex<Vec<u8>>| String::from_utf8_lossy(&seen.lock().expect("lock")).into_owned();
    let mut stdin = child.0.stdin.take().expect("stdin");
    let mut from = 0;
    for step in steps {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let t = text(&seen);
            if let Some(at) = t.get(from..).and_then(|rest| rest.find(step.text)) {
                from += at + step.text.len();
                break;
            }
            assert!(
                Instant::now() < deadline,
                "never printed `{}` in 120 s:\n{t}",
                step.text
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        (step.then)();
        let _ = stdin.write_all(step.keys);
        let _ = stdin.flush();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.0.try_wait().expect("wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "`{cmd}` did not finish in 120 s:\n{}",
            text(&seen)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(stdin);
    for r in readers {
        let _ = r.join();
    }
    text(&seen)
}

fn trace_names(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).expect("trace written");
    let events = ptscope_fxt::reader::read_events(&bytes).expect("valid FXT");
    events.iter().map(|e| e.name.to_string()).collect()
}

#[test]
fn attach_without_pid_picks_a_process_on_a_terminal() {
    if !usable() {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("ptscope-pick-p-")
        .tempdir()
        .expect("temporary directory");
    let dir = tmp.path();
    let exe = build(dir);
    let mut target = Reap(
        Command::new(&exe)
            .arg("forever")
            .stdout(Stdio::piped())
            .spawn()
            .expect("target"),
    );
    let pid = target.0.id();
    // Past its warm-up: from now on it runs pickme_spin.
    let mut said = String::new();
    std::io::BufReader::new(target.0.stdout.take().expect("stdout"))
        .read_line(&mut said)
        .expect("target output");
    assert_eq!(said, "spinning\n", "the target did not start");
    let trace = dir.join("t.fxt");
    let cmd = format!(
        "{} attach --callgraph fp --timer-resolution low -o {}",
        env!("CARGO_BIN_EXE_ptscope"),
        trace.display()
    );
    // Narrow to this test's target (other tests may run a program of the same name at the
    // same time), choose entry 1, and once the target has run 0.3 s of CPU (30 ticks at the
    // usual 100 Hz) while recorded, Ctrl-C.
    let filter = format!(
        "{}/ptscope_pick_target forever\n",
        dir.file_name().expect("name").to_string_lossy()
    );
    let out = on_terminal(
        &cmd,
        &[
            Step {
                text: "process (words to filter",
                then: &|| {},
                keys: filter.as_bytes(),
            },
            Step {
                text: "process (words to filter",
                then: &|| {},
                keys: b"1\n",
            },
            Step {
                text: "Ctrl-C to stop",
                then: &|| wait_for_cpu(pid, 30),
                keys: b"\x03",
            },
        ],
    );
    drop(target);
    assert!(out.contains("process (words to filter"), "{out}");
    assert!(out.contains(&format!("pid {pid}")), "{out}");
    let names = trace_names(&trace);
    assert!(names.iter().any(|n| n == "pickme_spin"), "{names:?}");
}

#[test]
fn trigger_question_mark_picks_a_function_on_a_terminal() {
    if !usable() {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("ptscope-pick-t-")
        .tempdir()
        .expect("temporary directory");
    let dir = tmp.path();
    let exe = build(dir);
    let trace = dir.join("t.fxt");
    let cmd = format!(
        "{} run --trigger '?' --callgraph fp --timer-resolution low -o {} -- {}",
        env!("CARGO_BIN_EXE_ptscope"),
        trace.display(),
        exe.display()
    );
    let out = on_terminal(
        &cmd,
        &[
            Step {
                text: "function (words to filter",
                then: &|| {},
                keys: b"pickme\n",
            },
            Step {
                text: "function (words to filter",
                then: &|| {},
                keys: b"1\n",
            },
        ],
    );
    assert!(out.contains("pickme_spin"), "{out}");
    let names = trace_names(&trace);
    assert!(names.iter().any(|n| n == "hit pickme_spin"), "{names:?}");
    assert!(names.iter().any(|n| n == "warm_up"), "{names:?}");
}
