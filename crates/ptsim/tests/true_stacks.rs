//! The true stacks on programs whose shape is hard to follow: signals delivered at a
//! syscall's return and asynchronously, a signal inside a handler, `longjmp` out of a
//! recursion and `siglongjmp` out of a handler, and stripped recursive code. Every
//! recording is checked against a name-free shadow stack by `testing::record`; these tests
//! also check the named stacks at chosen instants.

use ptsim::perfscript::Symbols;
use ptsim::stacks::Replay;
use ptsim::testing::{check_true_stacks, compile, record, scratch_dir, symbols, tools_available};
use ptsim::truth::StepKind;
use ptsim::{SimConfig, Simulation};
use std::path::Path;

fn tools() -> bool {
    tools_available(&["qemu-x86_64", "perf", "cc", "nm", "strip"])
}

const SIGNALS_C: &str = r#"
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
static volatile int usr1, usr2, sink;
static jmp_buf jb;
static sigjmp_buf sjb;
__attribute__((noinline)) long work(long n) { long s = 0; for (long i = 0; i < n; i++) s += i % 7; return s; }
__attribute__((noinline)) void in_handler(void) { sink++; }
static void on_usr2(int s) { (void)s; usr2++; in_handler(); }
static void on_usr1(int s) {
  (void)s;
  usr1++;
  in_handler();
  if (usr1 == 3) raise(SIGUSR2);       /* a signal inside a handler */
  if (usr1 == 5) raise(SIGUSR1);       /* blocked here: delivered as rt_sigreturn returns */
  if (usr1 == 12) siglongjmp(sjb, 1);  /* out of a handler, through its signal frame */
}
__attribute__((noinline)) int recurse(int n) {
  if (n == 0) longjmp(jb, 1);
  int r = recurse(n - 1);
  sink = r;
  return r + 1;
}
static void *thread_main(void *arg) { return (void *)work((long)arg); }
int main(void) {
  pthread_t t[4];
  for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, thread_main, (void *)(3000 + i * 100));
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, 0);
  sa.sa_handler = on_usr2;
  sigaction(SIGUSR2, &sa, 0);
  for (int i = 0; i < 10; i++) raise(SIGUSR1);   /* raise = tgkill: delivered at a syscall's return */
  if (!setjmp(jb)) recurse(20);
  if (!sigsetjmp(sjb, 1)) for (;;) raise(SIGUSR1);
  long total = 0;
  for (int i = 0; i < 4; i++) { void *r; pthread_join(t[i], &r); total += (long)r; }
  printf("%d %d %ld\n", usr1, usr2, total);
  return 0;
}
"#;

/// Perf's names for the recording in `dir`, and a file-name lookup for code without them.
fn names(dir: &Path, sim: &Simulation) -> Symbols {
    let log = ptsim::blocklog::BlockLog::read(&dir.join("ptsim-blocks.log")).unwrap();
    ptsim::truth_symbols(sim, &log, &dir.join("perf.data")).unwrap()
}

/// The stack's names after each step of the main thread, innermost last.
fn replay_names(sim: &Simulation, syms: &Symbols) -> Vec<Vec<String>> {
    let dso = |a: u64| sim.dso_at(a);
    let mut r = Replay::new(syms, &dso);
    sim.traces[0]
        .steps
        .iter()
        .map(|s| {
            r.apply(s);
            r.names()
        })
        .collect()
}

fn ends_with(stack: &[String], tail: &[&str]) -> bool {
    stack.len() >= tail.len()
        && stack[stack.len() - tail.len()..]
            .iter()
            .zip(tail)
            .all(|(a, b)| a == b)
}

#[test]
fn signals_at_syscall_return_nested_and_longjmp() {
    if !tools() {
        return;
    }
    let tmp = scratch_dir("truesig").unwrap();
    let dir = tmp.path().to_owned();
    let exe = compile(
        &dir,
        "sigs",
        "sigs.c",
        SIGNALS_C,
        &[
            "cc",
            "-O1",
            "-no-pie",
            "-pthread",
            "-fno-optimize-sibling-calls",
        ],
    )
    .unwrap();
    // `record` checks every thread against the shadow stack.
    let out = record(&dir, &[&exe], &SimConfig::default()).unwrap();
    assert!(out.status.success());
    let sim = &out.sim;
    assert_eq!(sim.traces.len(), 5, "main thread and four workers");
    let stats = check_true_stacks(&dir, sim).unwrap();
    // 12 SIGUSR1 and one SIGUSR2, each delivered on the way back from a syscall (one of
    // them from the rt_sigreturn of the handler that raised it); all but the one left by
    // siglongjmp and the one whose rt_sigreturn delivered the next return through
    // rt_sigreturn.
    assert_eq!(
        (stats[0].signals, stats[0].chained, stats[0].sigreturns),
        (13, 1, 11),
        "{:?}",
        stats[0]
    );
    // longjmp and siglongjmp drop frames without returning through them.
    assert_eq!(stats[0].cuts, 2, "{:?}", stats[0]);
    assert!(stats[0].max_depth >= 21, "{:?}", stats[0]);

    let syms = names(&dir, sim);
    let stacks = replay_names(sim, &syms);
    let steps = &sim.traces[0].steps;
    let nm = symbols(&exe).unwrap();
    let in_handler = nm["in_handler"];
    // Inside each handler the stack is main > raise > … (the code that made the syscall)
    // > on_usr1 > in_handler; the SIGUSR2 handler sits on top of the first one.
    let mut from_usr1 = 0;
    let mut from_usr2 = 0;
    for (i, s) in steps.iter().enumerate() {
        if s.kind != StepKind::Call || s.to != in_handler {
            continue;
        }
        let st = &stacks[i];
        assert!(ends_with(st, &["in_handler"]), "{st:?}");
        let main = st.iter().position(|n| n == "main").expect("main below");
        assert!(
            st[main + 1..].iter().any(|n| n.contains("raise")),
            "the handler runs above raise: {st:?}"
        );
        if ends_with(st, &["on_usr1", "in_handler"]) {
            from_usr1 += 1;
        } else if ends_with(st, &["on_usr2", "in_handler"]) {
            from_usr2 += 1;
            let h1 = st.iter().position(|n| n == "on_usr1").expect("nested");
            assert!(
                st[h1 + 1..].iter().any(|n| n.contains("raise")),
                "the nested handler runs above the handler's own raise: {st:?}"
            );
        } else {
            panic!("{st:?}");
        }
    }
    assert_eq!((from_usr1, from_usr2), (12, 1));
    // After longjmp lands in main, main is the top frame again: the twenty frames of
    // recurse, longjmp's and the signal frames are gone.
    let main = nm["main"];
    let main_end = nm.values().copied().filter(|&a| a > main).min().unwrap();
    let landings: Vec<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            matches!(s.kind, StepKind::IndirectJmp)
                && (main..main_end).contains(&s.to)
                && !(main..main_end).contains(&s.from)
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(landings.len(), 2, "longjmp and siglongjmp land in main");
    for i in landings {
        assert!(ends_with(&stacks[i], &["main"]), "{:?}", stacks[i]);
        assert!(
            ends_with(&stacks[i - 1], &["recurse"]) || stacks[i - 1].len() > stacks[i].len(),
            "{:?}",
            stacks[i - 1]
        );
    }
}

#[test]
fn timer_signal_interrupts_a_busy_loop() {
    if !tools() {
        return;
    }
    let tmp = scratch_dir("truetimer").unwrap();
    let dir = tmp.path().to_owned();
    let src = r#"
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
static volatile int hits;
__attribute__((noinline)) void count(void) { hits++; }
static void on_alarm(int s) { (void)s; count(); }
__attribute__((noinline)) long spin(long n) { long s = 0; for (long i = 0; i < n; i++) s += i ^ (i >> 3); return s; }
int main(void) {
  signal(SIGALRM, on_alarm);
  struct itimerval it = {{0, 1000}, {0, 1000}};
  setitimer(ITIMER_REAL, &it, 0);
  long s = 0;
  while (hits < 4) s += spin(1000);
  printf("%d %ld\n", hits, s);
  return 0;
}
"#;
    let exe = compile(&dir, "timer", "timer.c", src, &["cc", "-O1", "-no-pie"]).unwrap();
    let out = record(&dir, &[&exe], &SimConfig::default()).unwrap();
    let sim = &out.sim;
    let stats = check_true_stacks(&dir, sim).unwrap();
    assert!(stats[0].signals >= 4, "{:?}", stats[0]);
    let syms = names(&dir, sim);
    let stacks = replay_names(sim, &syms);
    let count = symbols(&exe).unwrap()["count"];
    let on_alarm = symbols(&exe).unwrap()["on_alarm"];
    let steps = &sim.traces[0].steps;
    // The timer fires in the busy loop (an asynchronous stop) and also at syscalls' returns,
    // until exit: always on top of the interrupted code, below libc's start-up frames.
    let (mut in_main, mut delivered_async) = (0, 0);
    for (i, s) in steps.iter().enumerate() {
        if s.kind == StepKind::Call && s.to == count {
            let st = &stacks[i];
            assert!(ends_with(st, &["on_alarm", "count"]), "{st:?}");
            assert!(st.iter().any(|f| f == "__libc_start_call_main"), "{st:?}");
            in_main += st.iter().any(|f| f == "main") as usize;
        }
        if s.kind == StepKind::Start
            && s.to == on_alarm
            && matches!(steps[i - 1].kind, StepKind::Async { .. })
        {
            // The handler sits on the frame it interrupted (checked by name in the
            // program's own code: in libc at exit a frame can carry a per-address name).
            let st = &stacks[i];
            assert!(ends_with(st, &["on_alarm"]) && st.len() > 3, "{st:?}");
            let stopped = syms.function(steps[i - 1].from).map(|f| f.0);
            if let Some(own @ ("spin" | "main")) = stopped {
                assert!(ends_with(st, &[own, "on_alarm"]), "{st:?}");
                delivered_async += 1;
            }
        }
    }
    assert!(in_main >= 4, "{in_main} handler calls above main");
    assert!(delivered_async >= 1, "no signal interrupted the busy loop");
}

const FIB_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) static long fib(long n) {
  if (n < 2) return n;
  long a = fib(n - 1);
  long b = fib(n - 2);
  return a + b;
}
__attribute__((noinline)) static long walk(long n) { long s = 0; while (n > 0) { s += fib(n % 7); n--; } return s; }
int main(int argc, char **argv) { long n = argc > 1 ? atol(argv[1]) : 14; printf("%ld %ld\n", fib(n), walk(n)); return 0; }
"#;

#[test]
fn stripped_recursion() {
    if !tools() {
        return;
    }
    let tmp = scratch_dir("truestrip").unwrap();
    let dir = tmp.path().to_owned();
    let exe = compile(
        &dir,
        "fib",
        "fib.c",
        FIB_C,
        &["cc", "-O1", "-fno-optimize-sibling-calls"],
    )
    .unwrap();
    let status = std::process::Command::new("strip")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(status.success());
    let out = record(&dir, &[&exe], &SimConfig::default()).unwrap();
    assert!(out.status.success());
    let stats = check_true_stacks(&dir, &out.sim).unwrap();
    // fib(14) nests 14 deep below main and libc's start-up frames.
    assert!(stats[0].max_depth >= 16, "{:?}", stats[0]);
}

/// Debian's bc (stripped). GNU bc runs user functions on its own stack, without C
/// recursion: this checks stripped code, not recursive frames.
#[test]
fn debian_bc_recursive_function() {
    if !tools() || !tools_available(&["bc"]) {
        return;
    }
    let tmp = scratch_dir("truebc").unwrap();
    let dir = tmp.path().to_owned();
    let prog = dir.join("fib.bc");
    std::fs::write(
        &prog,
        "define f(n){if(n<2)return n;return f(n-1)+f(n-2)}\nf(12)\nquit\n",
    )
    .unwrap();
    let bc = Path::new("/usr/bin/bc");
    let q = Path::new("-q");
    let out = record(&dir, &[bc, q, &prog], &SimConfig::default()).unwrap();
    assert!(out.status.success());
    let stats = check_true_stacks(&dir, &out.sim).unwrap();
    assert!(stats[0].steps > 10_000, "{:?}", stats[0]);
}

/// Debian's dash (stripped) runs a command substitution: a child's SIGCHLD arrives in the
/// parent's wait.
#[test]
fn debian_dash_child_signals() {
    if !tools() || !tools_available(&["dash"]) {
        return;
    }
    let tmp = scratch_dir("truedash").unwrap();
    let dir = tmp.path().to_owned();
    let out_file = dir.join("out");
    let script = format!(
        "x=$(/bin/echo abc | tr a b); echo \"$x\" > {}",
        out_file.display()
    );
    let sh = Path::new("/bin/dash");
    let c = Path::new("-c");
    let out = record(&dir, &[sh, c, Path::new(&script)], &SimConfig::default()).unwrap();
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), "bbc\n");
    // dash's SIGCHLD handler runs when its child exits, typically delivered as wait4
    // returns; every one returns through rt_sigreturn.
    let stats = check_true_stacks(&dir, &out.sim).unwrap();
    assert!(stats[0].signals >= 1, "{:?}", stats[0]);
    assert_eq!(stats[0].sigreturns, stats[0].signals, "{:?}", stats[0]);
}

/// Debian's python3.11, stripped to its exported symbols: the whole run, start-up
/// included (FIDELITY.md had its truth losing `_start … Py_BytesMain` for good).
#[test]
fn debian_python3_recursion() {
    if !tools() || !tools_available(&["python3"]) {
        return;
    }
    let tmp = scratch_dir("truepy").unwrap();
    let dir = tmp.path().to_owned();
    let script = dir.join("fib.py");
    std::fs::write(
        &script,
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nx = [fib(k) for k in range(12)]\n",
    )
    .unwrap();
    let py = Path::new("/usr/bin/python3");
    let out = record(
        &dir,
        &[py, Path::new("-I"), Path::new("-S"), &script],
        &SimConfig::default(),
    )
    .unwrap();
    assert!(out.status.success());
    // The whole interpreter run (~4.7 M steps) follows the shadow stack; no jump or
    // unmatched return drops frames there.
    let stats = check_true_stacks(&dir, &out.sim).unwrap();
    assert!(stats[0].steps > 1_000_000, "{:?}", stats[0]);
    assert_eq!(stats[0].cuts, 0, "{:?}", stats[0]);
}

/// The signals program stripped: `longjmp` and `siglongjmp` land in `main`, which has no
/// symbol, so only the return address of the `setjmp` call says which frame they land
/// in. Addresses come from an unstripped copy (`-no-pie`: the same layout).
#[test]
fn stripped_longjmp_unwinds_to_the_setjmp_caller() {
    if !tools() {
        return;
    }
    let tmp = scratch_dir("truestripjmp").unwrap();
    let dir = tmp.path().to_owned();
    let flags = [
        "cc",
        "-O1",
        "-no-pie",
        "-pthread",
        "-fno-optimize-sibling-calls",
    ];
    let exe = compile(&dir, "sigs", "sigs.c", SIGNALS_C, &flags).unwrap();
    let nm = symbols(&exe).unwrap();
    let stripped = dir.join("sigs-stripped");
    std::fs::copy(&exe, &stripped).unwrap();
    assert!(std::process::Command::new("strip")
        .arg(&stripped)
        .status()
        .unwrap()
        .success());
    let out = record(&dir, &[&stripped], &SimConfig::default()).unwrap();
    assert!(out.status.success());
    let sim = &out.sim;
    let stats = check_true_stacks(&dir, sim).unwrap();
    assert_eq!(stats[0].cuts, 2, "{:?}", stats[0]);
    let syms = names(&dir, sim);
    let stacks = replay_names(sim, &syms);
    let steps = &sim.traces[0].steps;
    let (main, recurse) = (nm["main"], nm["recurse"]);
    let main_end = nm.values().copied().filter(|&a| a > main).min().unwrap();
    // The stack main runs on: its depth when it first calls recurse.
    let call = steps
        .iter()
        .position(|s| s.kind == StepKind::Call && s.to == recurse)
        .unwrap();
    let depth = stacks[call].len() - 1;
    let landings: Vec<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            s.kind == StepKind::IndirectJmp
                && (main..main_end).contains(&s.to)
                && !(main..main_end).contains(&s.from)
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(landings.len(), 2, "longjmp and siglongjmp land in main");
    for i in landings {
        assert_eq!(stacks[i].len(), depth, "{:?}", stacks[i]);
        assert_eq!(stacks[i][..depth - 1], stacks[call][..depth - 1]);
    }
}
