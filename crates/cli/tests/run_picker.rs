//! The interactive pickers, driven through a real terminal (`script` allocates a pty):
//! `ptscope attach` without `-p` picks a process, `--trigger ?` picks a function.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

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

/// Runs `cmd` on a pseudo-terminal, typing `keys` (with pauses) into it.
fn on_terminal(cmd: &str, keys: &[(&[u8], u64)]) -> String {
    let mut child = Command::new("script")
        .args(["-qfec", cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script");
    let mut stdin = child.stdin.take().expect("stdin");
    for (k, pause_ms) in keys {
        std::thread::sleep(Duration::from_millis(*pause_ms));
        let _ = stdin.write_all(k);
        let _ = stdin.flush();
    }
    std::thread::sleep(Duration::from_millis(3000));
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
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
    // same time), choose entry 1, let it record, then Ctrl-C.
    let filter = format!(
        "ptscope-pick-p-{}/ptscope_pick_target forever\n",
        std::process::id()
    );
    let out = on_terminal(
        &cmd,
        &[(filter.as_bytes(), 800), (b"1\n", 1000), (b"\x03", 2500)],
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
    let out = on_terminal(&cmd, &[(b"pickme\n", 800), (b"1\n", 800)]);
    assert!(out.contains("pickme_spin"), "{out}");
    let names = trace_names(&trace);
    assert!(names.iter().any(|n| n == "hit pickme_spin"), "{names:?}");
    assert!(names.iter().any(|n| n == "warm_up"), "{names:?}");
    let _ = std::fs::remove_dir_all(dir);
}
