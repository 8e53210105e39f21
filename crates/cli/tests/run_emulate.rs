//! `ptscope run --backend emulate`: the program runs under qemu-user with ptscope's plugin
//! and the trace shows every call exactly — here a two-instruction leaf called 777 times
//! has 777 slices under its caller, which sampling could never show. Real qemu, real
//! programs (one built here, Debian's python3); skips loudly without qemu-x86_64 or gcc
//! (fails in CI).

use std::process::Command;

#[path = "common/emulate.rs"]
mod emulate;
use emulate::{compile, plugin, ptscope, record_ok, run, transcript};

const LEAF: &str = r#"
#include <stdio.h>
__attribute__((noinline)) int leaf(int x) { __asm__ volatile(""); return x + 1; }
__attribute__((noinline)) int caller(int n) { int s = 0; for (int i = 0; i < n; i++) s = leaf(s); return s; }
int main(void) { printf("%d\n", caller(777)); return 0; }
"#;

#[test]
fn every_call_of_a_tiny_leaf_is_a_slice_under_its_caller() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(dir.path(), "leaf", LEAF, &[]);
    let (stdout, err) = record_ok(&plugin, dir.path(), "./leaf");
    assert_eq!(stdout.trim(), "777");
    assert!(err.contains("host clock"), "the clock is named: {err}");
    assert!(dir.path().join("t.fxt.gz").is_file());
    let t = transcript(&plugin, dir.path(), "rec", "./leaf");
    let lines: Vec<&str> = t.lines().collect();
    let begin = lines
        .iter()
        .position(|l| l.ends_with("BEGIN caller"))
        .expect("caller in the trace");
    let end = lines
        .iter()
        .position(|l| l.ends_with("END   caller"))
        .expect("caller ends");
    let inside = &lines[begin + 1..end];
    assert_eq!(
        inside.iter().filter(|l| l.ends_with("BEGIN leaf")).count(),
        777
    );
    assert_eq!(
        inside.iter().filter(|l| l.ends_with("END   leaf")).count(),
        777
    );
    // Nothing else runs inside caller.
    assert_eq!(
        inside.len(),
        2 * 777,
        "{:?}",
        &inside[..inside.len().min(6)]
    );
}

#[test]
fn python_runs_under_emulation_with_named_frames() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(
        &plugin,
        dir.path(),
        &[
            "run",
            "--backend",
            "emulate",
            "-w",
            "rec",
            "-o",
            "py.fxt",
            "--",
            "/usr/bin/python3",
            "-c",
            "print(sum(range(10)))",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "45");
    let t = transcript(&plugin, dir.path(), "rec", "/usr/bin/python3");
    // Exported functions by their symbol, stripped ones by their `.eh_frame` range.
    assert!(
        t.contains("BEGIN Py_BytesMain"),
        "python3's exported functions are named"
    );
    assert!(
        t.contains("BEGIN python3.11+0x"),
        "stripped functions are named per function"
    );
    assert!(
        t.contains("BEGIN __libc_start_call_main"),
        "libc is named (debug file)"
    );
}

#[test]
fn missing_qemu_names_the_debian_package() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(ptscope())
        .env("PTSCOPE_EMULATE_PLUGIN", &plugin)
        .env("PATH", dir.path())
        .current_dir(dir.path())
        .args(["run", "--backend", "emulate", "--", "/bin/true"])
        .output()
        .expect("run ptscope");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("qemu-user"), "{err}");
}

#[test]
fn scripts_and_attach_are_refused_with_the_reason() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("s.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").expect("script");
    let out = run(
        &plugin,
        dir.path(),
        &[
            "run",
            "--backend",
            "emulate",
            "--",
            script.to_str().expect("utf-8 path"),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("is a script") && err.contains("/bin/sh"),
        "{err}"
    );
    let out = run(
        &plugin,
        dir.path(),
        &["attach", "--backend", "emulate", "-p", "1"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("cannot attach"), "{err}");
}

/// Process ids whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(needle) {
                out.push(pid);
            }
        }
    }
    out
}

#[test]
fn ctrl_c_leaves_no_qemu_behind_and_writes_the_trace() {
    use std::os::unix::process::CommandExt;
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(
        dir.path(),
        "spin",
        "__attribute__((noinline)) int f(int x) { __asm__ volatile(\"\"); return x + 1; }\n\
         int main(void) { int s = 0; for (;;) s = f(s); }\n",
        &[],
    );
    let rec = dir.path().join("rec");
    // Its own process group, as a terminal's foreground job: Ctrl-C reaches every member.
    let child = Command::new(ptscope())
        .env("PTSCOPE_EMULATE_PLUGIN", &plugin)
        .current_dir(dir.path())
        .args(["run", "--backend", "emulate", "-o", "spin.fxt", "-w"])
        .arg(&rec)
        .args(["--", "./spin"])
        .process_group(0)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn ptscope");
    let pgid = child.id() as i32;
    let needle = rec.to_string_lossy().into_owned();
    // Wait until qemu runs the program.
    let t0 = std::time::Instant::now();
    while processes_mentioning(&format!("out={needle}")).is_empty() {
        assert!(t0.elapsed().as_secs() < 30, "qemu never started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(-pgid, libc::SIGINT) };
    let out = child.wait_with_output().expect("ptscope ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        processes_mentioning(&format!("out={needle}")).is_empty(),
        "qemu is left behind: {err}"
    );
    assert!(dir.path().join("spin.fxt").is_file(), "{err}");
    assert!(err.contains("SIGINT"), "{err}");
}

/// A loop of 4 M calls, then a function that crashes the program: under the flight
/// recorder (a small per-thread ring) the block log stays within the ring, the trace
/// holds the last calls and the crash site, and the ring files (mapped, so they survive
/// a program killed by a signal) are folded into the log and removed.
const CRASH: &str = r#"
#include <signal.h>
__attribute__((noinline)) int leaf(int x) { __asm__ volatile(""); return x + 1; }
__attribute__((noinline)) void crash_here(int s) { if (s) raise(SIGSEGV); }
int main(void) { int s = 0; for (int i = 0; i < 4000000; i++) s = leaf(s); crash_here(s); return 0; }
"#;

#[test]
fn the_flight_recorder_keeps_the_last_moments_of_a_crashing_program() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(dir.path(), "crash", CRASH, &[]);
    let out = run(
        &plugin,
        dir.path(),
        &[
            "run",
            "--backend",
            "emulate",
            "--snapshot-size",
            "1M",
            "-w",
            "rec",
            "-o",
            "crash.fxt",
            "--",
            "./crash",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("SIGSEGV"), "{err}");
    assert!(err.contains("last 1 MiB"), "{err}");
    assert!(dir.path().join("crash.fxt").is_file(), "{err}");
    let rec = dir.path().join("rec");
    let leftovers: Vec<_> = std::fs::read_dir(&rec)
        .expect("working dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ring-"))
        .collect();
    assert!(leftovers.is_empty(), "ring files left: {leftovers:?}");
    // The whole run is ~4 M blocks (16 MB of executions): the ring kept about 1 MiB.
    let log = std::fs::metadata(rec.join("emulate-blocks.log"))
        .expect("log")
        .len();
    assert!(
        log < 3 << 20,
        "the block log holds {log} bytes for a 1 MiB ring"
    );
    let t = transcript(&plugin, dir.path(), "rec", "crash");
    let leaves = t.matches("BEGIN leaf").count();
    assert!(
        (50_000..1_000_000).contains(&leaves),
        "{leaves} calls of leaf kept of 4 M"
    );
    // The crash site is the end of the trace, under main.
    let crash = t
        .lines()
        .rfind(|l| l.contains("BEGIN crash_here"))
        .unwrap_or_else(|| {
            panic!(
                "crash_here not in the trace:\n{}",
                &t[t.len().saturating_sub(2000)..]
            )
        });
    assert!(crash.contains("crash_here"));
    assert!(
        t.contains("BEGIN raise")
            || t.contains("BEGIN __GI_raise")
            || t.contains("BEGIN __pthread_kill"),
        "the signal's path is missing"
    );
}

/// Generated code: an RWX page holds a function that calls `hook`; it runs 100 times, is
/// rewritten in place (a new immediate), and runs 50 times more.
const JIT: &str = r#"
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
__attribute__((noinline)) int hook(int x) { __asm__ volatile(""); return x * 2; }
typedef int (*fn)(void);
static unsigned char *emit(unsigned char *p, int imm) {
    /* sub rsp,8; mov edi,imm; mov rax,hook; call rax; add rsp,8; ret */
    unsigned char code[] = {0x48, 0x83, 0xEC, 0x08, 0xBF, 0, 0, 0, 0, 0x48, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0,
                            0xFF, 0xD0, 0x48, 0x83, 0xC4, 0x08, 0xC3};
    uint64_t h = (uint64_t)(uintptr_t)&hook;
    memcpy(code + 5, &imm, 4);
    memcpy(code + 11, &h, 8);
    memcpy(p, code, sizeof code);
    return p;
}
__attribute__((noinline)) int run_jit(fn f, int n) { int s = 0; for (int i = 0; i < n; i++) s += f(); return s; }
int main(void) {
    unsigned char *p = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    fn f = (fn)emit(p, 5);
    int a = run_jit(f, 100);
    emit(p, 7);
    int b = run_jit(f, 50);
    printf("%d %d\n", a, b);
    return 0;
}
"#;

#[test]
fn generated_and_rewritten_code_is_traced_without_a_crash() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(dir.path(), "jit", JIT, &[]);
    let (stdout, _) = record_ok(&plugin, dir.path(), "./jit");
    // The rewrite took effect under emulation: 100 × 10, then 50 × 14.
    assert_eq!(stdout.trim(), "1000 700");
    let t = transcript(&plugin, dir.path(), "rec", "./jit");
    let names: Vec<&str> = t
        .lines()
        .filter_map(|l| l.split_once(" BEGIN ").map(|(_, n)| n))
        .collect();
    let runs: Vec<usize> = (0..names.len())
        .filter(|&i| names[i] == "run_jit")
        .collect();
    assert_eq!(runs.len(), 2, "two run_jit calls: {names:?}");
    // Inside each run_jit: only the generated function (unnamed) calling hook, every time.
    for (&start, n) in runs.iter().zip([100, 50]) {
        let inside = &names[start + 1..start + 1 + 2 * n];
        for pair in inside.chunks(2) {
            assert_eq!(pair, ["[unknown]", "hook"], "in run_jit: {pair:?}");
        }
    }
    let ends = t.lines().filter(|l| l.ends_with("END   hook")).count();
    assert_eq!(ends, 150, "every hook call ends");
}

/// Two threads named with `pthread_setname_np`: one by itself (`prctl(PR_SET_NAME)`),
/// one by main (a write to `/proc/self/task/TID/comm`); each spins `argv[1]` times.
const NAMED: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static pthread_barrier_t ready, go;
static long n;
__attribute__((noinline)) long spin(long x) { __asm__ volatile(""); return x + 1; }
static long run(void) { long s = 0; for (long i = 0; i < n; i++) s = spin(s); return s; }
static void *self_named(void *a) {
  pthread_setname_np(pthread_self(), "self-named");
  pthread_barrier_wait(&ready); pthread_barrier_wait(&go);
  return (void *)run();
}
static void *other_named(void *a) {
  pthread_barrier_wait(&ready); pthread_barrier_wait(&go);
  return (void *)run();
}
int main(int argc, char **argv) {
  n = argc > 1 ? atol(argv[1]) : 1000;
  pthread_barrier_init(&ready, 0, 3); pthread_barrier_init(&go, 0, 3);
  pthread_t a, b;
  pthread_create(&a, 0, self_named, 0); pthread_create(&b, 0, other_named, 0);
  pthread_barrier_wait(&ready);
  pthread_setname_np(b, "named-by-main");
  pthread_barrier_wait(&go);
  pthread_join(a, 0); pthread_join(b, 0);
  printf("%ld\n", run());
  return 0;
}
"#;

/// Thread track names in an FXT trace, their `[tid=…]` left out, sorted.
fn thread_names(path: &std::path::Path) -> Vec<String> {
    use ptscope_fxt::reader::{Reader, Record};
    let data = ptscope_output::read_trace_file(path).expect("the trace");
    let mut names: std::collections::BTreeMap<u64, String> = Default::default();
    for r in Reader::new(&data) {
        if let Ok(Record::KernelObject(k)) = r {
            if k.obj_type == 2 {
                names.insert(k.koid, k.name.to_string());
            }
        }
    }
    // The trace's own info track is no thread of the program.
    let mut v: Vec<String> = names
        .into_values()
        .filter(|n| n != "trace info")
        .map(|n| n.split(" [tid=").next().unwrap_or_default().to_string())
        .collect();
    v.sort();
    v
}

/// Issue 24: the emulate backend named every thread after the program. Threads that
/// name themselves, or are named by another thread, carry those names, as sampling
/// shows them (the same program under both backends).
#[test]
fn threads_keep_the_names_they_were_given_as_under_sampling() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(dir.path(), "named", NAMED, &["-pthread"]);
    let out = run(
        &plugin,
        dir.path(),
        &[
            "run",
            "-q",
            "--backend",
            "emulate",
            "--full-execution",
            "-o",
            "e.fxt",
            "--",
            "./named",
            "300",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let emulated = thread_names(&dir.path().join("e.fxt"));
    assert_eq!(
        emulated,
        ["named", "named-by-main", "self-named"],
        "{emulated:?}"
    );
    #[path = "common/perf_env.rs"]
    #[allow(unused)]
    mod perf_env;
    if !perf_env::perf_usable("the sampling half of the thread-name test") {
        return;
    }
    // Long enough for every thread to be sampled.
    let out = run(
        &plugin,
        dir.path(),
        &["run", "-q", "-o", "s.fxt", "--", "./named", "30000000"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(thread_names(&dir.path().join("s.fxt")), emulated);
}
