//! The emulate backend's times: the host clock (default) and the virtual clock
//! (`--clock virtual`: instructions at 1 GHz plus the real time spent in syscalls), the
//! fallback for block logs without host times, and the notice of an `exec` (qemu-user
//! runs the new program natively, untraced). Real qemu and programs built here; skips
//! loudly without qemu-x86_64 or gcc (fails in CI).

use std::collections::HashMap;
use std::path::Path;

#[path = "common/emulate.rs"]
mod emulate;
use emulate::{compile, plugin, run, run_ok};

/// A slice of the trace: name, thread koid, start and end (ns).
#[derive(Debug, Clone)]
struct Slice {
    name: String,
    tid: u64,
    depth: usize,
    start: u64,
    end: u64,
}

/// The trace's slices and instants (`(tid, time, name)`), checking on the way that each
/// thread's records are in time order and that no slice ends before it starts.
fn read_trace(path: &Path) -> (Vec<Slice>, Vec<(u64, u64, String)>) {
    use ptscope_fxt::reader::EventKind;
    let bytes = std::fs::read(path).expect("trace");
    let events = ptscope_fxt::reader::read_events(&bytes).expect("valid FXT");
    let mut open: HashMap<u64, Vec<(String, u64)>> = HashMap::new();
    let mut last: HashMap<u64, u64> = HashMap::new();
    let mut slices = Vec::new();
    let mut instants = Vec::new();
    for e in &events {
        let prev = last.insert(e.tid, e.timestamp).unwrap_or(0);
        assert!(
            e.timestamp >= prev,
            "thread {} goes back in time: {} after {prev} ({})",
            e.tid,
            e.timestamp,
            e.name
        );
        match e.kind {
            EventKind::Begin => open
                .entry(e.tid)
                .or_default()
                .push((e.name.to_string(), e.timestamp)),
            EventKind::End => {
                let stack = open.entry(e.tid).or_default();
                let (name, start) = stack.pop().expect("an end closes a begin");
                assert!(e.timestamp >= start, "{name} ends before it starts");
                slices.push(Slice {
                    name,
                    tid: e.tid,
                    depth: stack.len(),
                    start,
                    end: e.timestamp,
                });
            }
            EventKind::Complete { end } => {
                assert!(end >= e.timestamp, "{} ends before it starts", e.name);
                slices.push(Slice {
                    name: e.name.to_string(),
                    tid: e.tid,
                    depth: open.get(&e.tid).map_or(0, Vec::len),
                    start: e.timestamp,
                    end,
                });
            }
            EventKind::Instant => instants.push((e.tid, e.timestamp, e.name.to_string())),
            _ => {}
        }
    }
    (slices, instants)
}

fn slice<'a>(slices: &'a [Slice], name: &str) -> &'a Slice {
    slices
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no slice {name}"))
}

/// `spin(n)` runs exactly `2 n` instructions in its loop (`dec`, `jnz`) and a few more.
const SLEEPY: &str = r#"
#include <stdio.h>
#include <time.h>
__attribute__((noinline)) int before_sleep(int x) { __asm__ volatile(""); return x * 3 + 1; }
__attribute__((noinline)) int after_sleep(int x) { __asm__ volatile(""); return x * 5 + 2; }
__attribute__((noinline)) void spin(long n) { __asm__ volatile("1: dec %0\n jnz 1b" : "+r"(n)); }
int main(void) {
    int a = before_sleep(1);
    struct timespec ts = {0, 200000000};
    nanosleep(&ts, 0);
    a += after_sleep(a);
    spin(3000000);
    printf("%d\n", a);
    return 0;
}
"#;

const SPIN_ITERATIONS: u64 = 3_000_000;

#[test]
fn a_sleep_lasts_its_time_on_both_clocks_and_the_virtual_clock_drops_the_slowdown() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(dir.path(), "sleepy", SLEEPY, &[]);
    let err = run_ok(
        &plugin,
        dir.path(),
        &[
            "run",
            "--backend",
            "emulate",
            "--no-decode",
            "-w",
            "rec",
            "--",
            "./sleepy",
        ],
    );
    assert!(!err.contains("exec'd"), "no exec here: {err}");
    let decode = |clock: Option<&str>, out: &str| {
        let mut args = vec!["decode", "rec", "--executable", "./sleepy", "-o", out];
        if let Some(c) = clock {
            args.extend(["--clock", c]);
        }
        let err = run_ok(&plugin, dir.path(), &args);
        let (slices, instants) = read_trace(&dir.path().join(out));
        (err, slices, instants)
    };
    let (err_host, host, host_marks) = decode(None, "host.fxt");
    let (err_virt, virt, virt_marks) = decode(Some("virtual"), "virt.fxt");
    assert!(err_host.contains("host clock"), "{err_host}");
    assert!(err_virt.contains("virtual clock"), "{err_virt}");
    // The trace itself says which clock it follows.
    assert!(
        host_marks
            .iter()
            .any(|m| m.2.starts_with("clock: host clock")),
        "{host_marks:?}"
    );
    assert!(
        virt_marks
            .iter()
            .any(|m| m.2.starts_with("clock: virtual clock")),
        "{virt_marks:?}"
    );

    for (clock, slices) in [("host", &host), ("virtual", &virt)] {
        let gap = slice(slices, "after_sleep").start - slice(slices, "before_sleep").end;
        assert!(
            gap >= 200_000_000,
            "{clock} clock: only {gap} ns between the calls around a 200 ms sleep"
        );
        // main's direct callees fit in main, one after the other.
        let main = slice(slices, "main");
        let children: Vec<&Slice> = slices
            .iter()
            .filter(|s| {
                s.tid == main.tid
                    && s.depth == main.depth + 1
                    && s.start >= main.start
                    && s.end <= main.end
            })
            .collect();
        assert!(children.len() >= 4, "{clock}: {children:?}");
        let sum: u64 = children.iter().map(|s| s.end - s.start).sum();
        assert!(
            sum <= main.end - main.start,
            "{clock}: callees last longer than main"
        );
        let spin = slice(slices, "spin");
        assert!(spin.end > spin.start, "{clock}: spin has no length");
    }
    // Virtual: spin lasts its instructions at 1 ns each, whatever the emulation cost.
    let v = slice(&virt, "spin");
    let dur = v.end - v.start;
    assert!(
        (2 * SPIN_ITERATIONS..2 * SPIN_ITERATIONS + 100).contains(&dur),
        "virtual clock: spin lasts {dur} ns for {} instructions",
        2 * SPIN_ITERATIONS
    );
    // Host: the same loop under emulation, at least as long as native would take.
    let h = slice(&host, "spin");
    assert!(
        h.end - h.start >= SPIN_ITERATIONS / 10,
        "host clock: spin lasts only {} ns",
        h.end - h.start
    );

    // --clock is refused where it cannot apply.
    let out = run(
        &plugin,
        dir.path(),
        &["decode", "sleepy", "--clock", "host", "-o", "x.fxt"],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("emulate backend only"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Rewrites a block log as the plugin wrote it before host times: exec streams without
/// `HOST`/`SYSCALL`/`SYSRET` words, no exec-call chunks.
fn strip_host_times(log: &[u8]) -> Vec<u8> {
    let u32_at = |d: &[u8], at: usize| u32::from_le_bytes(d[at..at + 4].try_into().unwrap());
    let mut out = Vec::new();
    let mut at = 0;
    while at < log.len() {
        let kind = log[at];
        let len = u64::from_le_bytes(log[at + 8..at + 16].try_into().unwrap()) as usize;
        let body = &log[at + 16..at + 16 + len];
        match kind {
            2 => {
                let mut kept = Vec::new();
                let mut q = 0;
                while q < body.len() {
                    let w = u32_at(body, q);
                    let skip = match w {
                        u32::MAX => {
                            kept.extend_from_slice(&body[q..q + 12]);
                            12
                        }
                        w if w == u32::MAX - 1 => 12,
                        w if w == u32::MAX - 2 => 16,
                        w if w == u32::MAX - 3 => 20,
                        // SKIP and its count (stack mode): kept.
                        w if w == u32::MAX - 4 => {
                            kept.extend_from_slice(&body[q..q + 8]);
                            8
                        }
                        _ => {
                            kept.extend_from_slice(&body[q..q + 4]);
                            4
                        }
                    };
                    q += skip;
                }
                out.extend_from_slice(&log[at..at + 8]);
                out.extend_from_slice(&(kept.len() as u64).to_le_bytes());
                out.extend_from_slice(&kept);
            }
            4 => {}
            _ => out.extend_from_slice(&log[at..at + 16 + len]),
        }
        at += 16 + len;
    }
    out
}

#[test]
fn a_log_without_host_times_decodes_on_the_instruction_clock_with_a_notice() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(dir.path(), "sleepy", SLEEPY, &[]);
    run_ok(
        &plugin,
        dir.path(),
        &[
            "run",
            "--backend",
            "emulate",
            "--no-decode",
            "-w",
            "rec",
            "--",
            "./sleepy",
        ],
    );
    let log = dir.path().join("rec/emulate-blocks.log");
    let old = strip_host_times(&std::fs::read(&log).expect("log"));
    assert!(old.len() < std::fs::metadata(&log).expect("log").len() as usize);
    std::fs::write(&log, old).expect("rewrite the log");
    let err = run_ok(
        &plugin,
        dir.path(),
        &["decode", "rec", "--executable", "./sleepy", "-o", "old.fxt"],
    );
    assert!(err.contains("no host timestamps"), "{err}");
    let (slices, marks) = read_trace(&dir.path().join("old.fxt"));
    assert!(
        marks.iter().any(|m| m.2.contains("no host timestamps")),
        "{marks:?}"
    );
    // The instruction clock has no syscall time: the sleep is not seen.
    let gap = slice(&slices, "after_sleep").start - slice(&slices, "before_sleep").end;
    assert!(gap < 200_000_000, "{gap}");
    let spin = slice(&slices, "spin");
    assert!((2 * SPIN_ITERATIONS..2 * SPIN_ITERATIONS + 100).contains(&(spin.end - spin.start)));
}

const EXECER: &str = r#"
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) int before_exec(int x) { __asm__ volatile(""); return x + 1; }
int main(int argc, char **argv) {
    char *args[] = {"true", 0};
    printf("%d\n", before_exec(argc));
    fflush(stdout);
    execv(argc > 1 ? "/nonexistent/ptscope-test" : "/bin/true", args);
    perror("execv");
    return 0;
}
"#;

#[test]
fn an_exec_is_said_once_and_marked_in_the_trace_and_a_failed_one_is_not() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(dir.path(), "execer", EXECER, &[]);
    let err = run_ok(
        &plugin,
        dir.path(),
        &[
            "run",
            "--backend",
            "emulate",
            "-o",
            "exec.fxt",
            "--",
            "./execer",
        ],
    );
    assert_eq!(err.matches("exec'd").count(), 1, "{err}");
    assert!(
        err.contains("exec'd /bin/true") && err.contains("nothing after the exec is traced"),
        "{err}"
    );
    let (slices, marks) = read_trace(&dir.path().join("exec.fxt"));
    let exec = marks
        .iter()
        .find(|m| m.2.starts_with("exec: thread"))
        .unwrap_or_else(|| panic!("no exec marker in {marks:?}"));
    assert!(exec.2.contains("/bin/true"), "{}", exec.2);
    // The marker is where the program exec'd: after everything it ran.
    let b = slice(&slices, "before_exec");
    assert!(
        exec.1 >= b.end,
        "exec at {} before before_exec ended",
        exec.1
    );

    let err = run_ok(
        &plugin,
        dir.path(),
        &[
            "run",
            "--backend",
            "emulate",
            "-o",
            "failed.fxt",
            "--",
            "./execer",
            "fail",
        ],
    );
    assert!(!err.contains("exec'd"), "a failed exec is no exec: {err}");
    let (_, marks) = read_trace(&dir.path().join("failed.fxt"));
    assert!(!marks.iter().any(|m| m.2.starts_with("exec:")), "{marks:?}");
}
