//! The interactive pickers, driven through a real terminal (`script` allocates a pty):
//! `ptscope attach` without `-p` picks a process, `--trigger ?` picks a function.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

const SPINNER: &str = r#"volatile unsigned long s;
__attribute__((noinline)) void warm_up(void) { for (unsigned long i = 0; i < 400000000; i++) s += i; }
__attribute__((noinline)) void pickme_spin(void) { for (unsigned long i = 0; i < 100000; i++) s += i; }
int main(int argc, char **argv) {
    warm_up();
    for (int k = 0; argc > 1 || k < 3000; k++) pickme_spin();
    return 0;
}
"#;

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

/// Runs `cmd` on a pseudo-terminal; for each step `(text, pause_ms, keys)`, waits (up to
/// 60 s) until the output since the previous step contains `text`, pauses, then types
/// `keys`. Waits for the command to end (up to 120 s) and returns everything printed.
fn on_terminal(cmd: &str, steps: &[(&str, u64, &[u8])]) -> String {
    let mut child = Command::new("script")
        .args(["-qfec", cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script");
    let seen = Arc::new(Mutex::new(Vec::<u8>::new()));
    let readers: Vec<_> = [
        Box::new(child.stdout.take().expect("stdout")) as Box<dyn Read + Send>,
        Box::new(child.stderr.take().expect("stderr")),
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
    let mut stdin = child.stdin.take().expect("stdin");
    let mut from = 0;
    for (wait_for, pause_ms, keys) in steps {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let t = text(&seen);
            if let Some(at) = t.get(from..).and_then(|rest| rest.find(wait_for)) {
                from += at + wait_for.len();
                break;
            }
            assert!(
                Instant::now() < deadline,
                "never printed `{wait_for}`:\n{t}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(*pause_ms));
        let _ = stdin.write_all(keys);
        let _ = stdin.flush();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`{cmd}` did not finish:\n{}", text(&seen));
        }
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
    let dir = std::env::temp_dir().join(format!("ptscope-pick-p-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("tmp");
    let exe = build(&dir);
    let mut target = Command::new(&exe).arg("forever").spawn().expect("target");
    let trace = dir.join("t.fxt");
    let cmd = format!(
        "{} attach --callgraph fp --timer-resolution low -o {}",
        env!("CARGO_BIN_EXE_ptscope"),
        trace.display()
    );
    // Narrow to this test's target (other tests may run a program of the same name at the
    // same time), choose entry 1, and once recording has run a moment, Ctrl-C.
    let filter = format!(
        "ptscope-pick-p-{}/ptscope_pick_target forever\n",
        std::process::id()
    );
    let out = on_terminal(
        &cmd,
        &[
            ("process (words to filter", 0, filter.as_bytes()),
            ("process (words to filter", 0, b"1\n"),
            ("Ctrl-C to stop", 1500, b"\x03"),
        ],
    );
    let _ = target.kill();
    let _ = target.wait();
    assert!(out.contains("process (words to filter"), "{out}");
    assert!(out.contains(&format!("pid {}", target.id())), "{out}");
    let names = trace_names(&trace);
    assert!(names.iter().any(|n| n == "pickme_spin"), "{names:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn trigger_question_mark_picks_a_function_on_a_terminal() {
    if !usable() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ptscope-pick-t-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("tmp");
    let exe = build(&dir);
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
            ("function (words to filter", 0, b"pickme\n"),
            ("function (words to filter", 0, b"1\n"),
        ],
    );
    assert!(out.contains("pickme_spin"), "{out}");
    let names = trace_names(&trace);
    assert!(names.iter().any(|n| n == "hit pickme_spin"), "{names:?}");
    assert!(names.iter().any(|n| n == "warm_up"), "{names:?}");
    let _ = std::fs::remove_dir_all(dir);
}
