//! Programs in several languages, built by the test, recorded and decoded by perf: the
//! decoded branches must be exactly those that ran.

use ptsim::expected::BranchKind;
use ptsim::perfscript::{compare, decode, Comparison};
use ptsim::testing::{compile, record, scratch_dir, symbols, tools_available};
use ptsim::truth::StepKind;
use ptsim::{SimConfig, Simulation};
use std::path::Path;

/// Records `exe`, decodes it with perf and returns the simulation and the comparison.
fn record_and_compare(dir: &Path, exe: &Path) -> (Simulation, Comparison) {
    let out = record(dir, &[exe], &SimConfig::default()).unwrap();
    assert!(out.status.success(), "{} failed under qemu", exe.display());
    let got = decode(&dir.join("perf.data")).unwrap();
    let c = compare(&out.sim.expected, &got);
    assert!(
        c.exact(),
        "{}: {} of {} matched, perf reported {}: {:#?}",
        exe.display(),
        c.matched,
        c.expected,
        c.reported,
        c.differences
    );
    assert_eq!(out.sim.stats.unmapped_blocks, 0);
    (out.sim, c)
}

fn calls_to(sim: &Simulation, tid_index: usize) -> usize {
    sim.truth()[tid_index]
        .branches
        .iter()
        .filter(|b| b.kind == BranchKind::Call)
        .count()
}

#[test]
fn c_threads() {
    if !tools_available(&["qemu-x86_64", "perf", "cc"]) {
        return;
    }
    let tmp = scratch_dir("threads").unwrap();
    let dir = tmp.path().to_owned();
    let src = r#"
#include <pthread.h>
#include <stdio.h>
__attribute__((noinline)) long work(long n) { long s = 0; for (long i = 0; i < n; i++) s += i % 7; return s; }
static void *thread_main(void *arg) { return (void *)work((long)arg); }
int main(void) {
  pthread_t t[3];
  for (long i = 0; i < 3; i++) pthread_create(&t[i], NULL, thread_main, (void *)(2000 + i * 100));
  long total = work(500);
  for (int i = 0; i < 3; i++) { void *r; pthread_join(t[i], &r); total += (long)r; }
  printf("%ld\n", total);
  return 0;
}
"#;
    let exe = compile(
        &dir,
        "threads",
        "threads.c",
        src,
        &["cc", "-O1", "-pthread"],
    )
    .unwrap();
    let (sim, c) = record_and_compare(&dir, &exe);
    let truth = sim.truth();
    assert_eq!(truth.len(), 4, "main thread and three workers");
    assert_eq!(sim.recording.threads.len(), 4);
    // Each worker starts where clone returns, makes calls of its own and exits by a
    // syscall.
    for (i, t) in truth.iter().enumerate().skip(1) {
        assert_eq!(t.branches[0].kind, BranchKind::TraceStart, "thread {i}");
        assert_eq!(
            t.branches.last().map(|b| b.kind),
            Some(BranchKind::SyscallEnd),
            "thread {i}"
        );
        assert!(calls_to(&sim, i) > 0, "thread {i} made no calls");
    }
    assert!(calls_to(&sim, 0) > 0, "the main thread made no calls");
    assert!(c.matched > 10_000);
    // Threads interleave on one instruction clock; timing stays packet-exact across the
    // gaps (CYC before every PSB, MTC, TSC).
    assert!(c.max_lag_ns < 1_000 && c.max_early_ns < 1_000, "{c:?}");
}

#[test]
fn cpp_exceptions() {
    if !tools_available(&["qemu-x86_64", "perf", "g++"]) {
        return;
    }
    let tmp = scratch_dir("cpp").unwrap();
    let dir = tmp.path().to_owned();
    let src = r#"
#include <cstdio>
#include <stdexcept>
#include <vector>
__attribute__((noinline)) int thrower(int i) { if (i % 3 == 0) throw std::runtime_error("x"); return i; }
int main() {
  std::vector<int> v; int caught = 0;
  for (int i = 0; i < 9; i++) { try { v.push_back(thrower(i)); } catch (const std::exception &) { caught++; } }
  std::printf("%zu %d\n", v.size(), caught);
}
"#;
    let exe = compile(&dir, "cpp", "cpp.cc", src, &["g++", "-O1"]).unwrap();
    let (_sim, c) = record_and_compare(&dir, &exe);
    // Unwinding through libgcc_s makes for many branches.
    assert!(c.matched > 50_000, "{}", c.matched);
}

#[test]
fn rust_program() {
    if !tools_available(&["qemu-x86_64", "perf", "rustc"]) {
        return;
    }
    let tmp = scratch_dir("rust").unwrap();
    let dir = tmp.path().to_owned();
    let src = r#"
#[inline(never)]
fn fib(n: u64) -> u64 { if n < 2 { n } else { fib(n - 1) + fib(n - 2) } }
fn main() {
    // A quiet hook: the default one may capture a backtrace, which is slow under qemu.
    std::panic::set_hook(Box::new(|_| {}));
    let unwound = std::panic::catch_unwind(|| { if fib(12) > 0 { panic!("boom") } }).is_err();
    let v: Vec<u64> = (0..10).map(fib).collect();
    println!("{v:?} {unwound}");
}
"#;
    let exe = compile(&dir, "rs", "rs.rs", src, &["rustc", "-O", "-g"]).unwrap();
    let (_sim, c) = record_and_compare(&dir, &exe);
    assert!(c.matched > 5_000, "{}", c.matched);
}

#[test]
fn ocaml_exceptions() {
    if !tools_available(&["qemu-x86_64", "perf", "ocamlopt"]) {
        return;
    }
    let tmp = scratch_dir("ocaml").unwrap();
    let dir = tmp.path().to_owned();
    let src = r#"
exception Found of int
let rec search l n = match l with [] -> () | x :: r -> if x = n then raise (Found x) else search r n
let () =
  let l = List.init 100 (fun i -> i) in
  let hits = ref 0 in
  for i = 0 to 50 do (try search l i with Found _ -> incr hits) done;
  Printf.printf "%d\n" !hits
"#;
    let exe = compile(&dir, "ml", "ml.ml", src, &["ocamlopt"]).unwrap();
    let (sim, _c) = record_and_compare(&dir, &exe);
    // An OCaml raise is a jump to the handler, not a return: the truth holds frames of
    // `search` that never return. Count them: one raise per caught lookup.
    let main = &sim.traces[0];
    let mut stack = ptsim::truth::StackReplay::default();
    let mut deepest = 0;
    for s in &main.steps {
        stack.apply(s);
        deepest = deepest.max(stack.frames.len());
    }
    assert!(
        deepest > 50,
        "recursive search should nest deeply, got {deepest}"
    );
}

#[test]
fn go_program() {
    if !tools_available(&["qemu-x86_64", "perf", "go"]) {
        return;
    }
    let tmp = scratch_dir("go").unwrap();
    let dir = tmp.path().to_owned();
    std::fs::write(
        dir.join("go.go"),
        r#"package main
import "fmt"
//go:noinline
func fib(n int) int { if n < 2 { return n }; return fib(n-1) + fib(n-2) }
func main() {
	ch := make(chan int)
	for i := 0; i < 3; i++ { go func(k int) { ch <- fib(12 + k) }(i) }
	s := 0
	for i := 0; i < 3; i++ { s += <-ch }
	fmt.Println(s)
}
"#,
    )
    .unwrap();
    let status = std::process::Command::new("go")
        .args(["build", "-o", "gop", "go.go"])
        .current_dir(&dir)
        .env("GOCACHE", dir.join("gocache"))
        .env("GO111MODULE", "off")
        .status()
        .unwrap();
    assert!(status.success());
    // The Go runtime preempts goroutines with signals (SIGURG) at times that vary from
    // run to run; a signal can land where perf 6.1's decoding is uncertain (see
    // docs/simulation.md), which made this comparison flaky. Without async preemption
    // the run is deterministic; signals are covered by `c_timer_signals`.
    std::env::set_var("GODEBUG", "asyncpreemptoff=1");
    let (sim, _c) = record_and_compare(&dir, &dir.join("gop"));
    // The Go runtime starts several OS threads.
    assert!(sim.traces.len() >= 2, "{} threads", sim.traces.len());
}

#[test]
fn c_timer_signals() {
    if !tools_available(&["qemu-x86_64", "perf", "cc"]) {
        return;
    }
    let tmp = scratch_dir("signals").unwrap();
    let dir = tmp.path().to_owned();
    let src = r#"
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
static volatile int hits;
static void on_alarm(int s) { (void)s; hits++; }
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
    let exe = compile(&dir, "sig", "sig.c", src, &["cc", "-O1"]).unwrap();
    let (sim, c) = record_and_compare(&dir, &exe);
    // The timer interrupts the busy loop between blocks: tracing stops asynchronously and
    // restarts in the handler, then resumes where it stopped after rt_sigreturn.
    let asyncs = sim.traces[0]
        .steps
        .iter()
        .filter(|s| matches!(s.kind, ptsim::truth::StepKind::Async { .. }))
        .count();
    assert!(asyncs >= 1, "no asynchronous stop");
    // perf reports each stop as `tr end async` at the interrupted instruction, nothing
    // unpredictable: it did not while the recording lacked BranchEn (`branch`) in its
    // config, which made perf ignore every FUP and walk on past it.
    assert_eq!(c.uncertain, 0, "unpredictable stretches in perf's output");
    let got = decode(&dir.join("perf.data")).unwrap();
    let ends = got
        .iter()
        .filter(|b| b.kind == BranchKind::AsyncEnd)
        .count();
    assert_eq!(
        ends, asyncs,
        "perf's `tr end async` vs the truth's asynchronous stops"
    );
}

#[test]
fn c_timer_signals_right_after_returns() {
    if !tools_available(&["qemu-x86_64", "perf", "cc"]) {
        return;
    }
    let tmp = scratch_dir("sigret").unwrap();
    let dir = tmp.path().to_owned();
    // A third of the loop's blocks end in `ret`: of 20 timer signals, some land right after
    // one, where the block log shows the handler as the return's destination.
    let src = r#"
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
static volatile sig_atomic_t hits;
static volatile long sink;
static void on_alarm(int s) { (void)s; hits++; }
__attribute__((noinline)) long tiny(long i) { return sink + i; }
int main(void) {
  signal(SIGALRM, on_alarm);
  struct itimerval it = {{0, 200}, {0, 200}};
  setitimer(ITIMER_REAL, &it, 0);
  long s = 0;
  while (hits < 20) s += tiny(s & 7);
  printf("%d %ld\n", (int)hits, s);
  return 0;
}
"#;
    let exe = compile(&dir, "sigret", "sigret.c", src, &["cc", "-O1", "-no-pie"]).unwrap();
    let (sim, c) = record_and_compare(&dir, &exe);
    assert_eq!(c.uncertain, 0, "unpredictable stretches in perf's output");
    let on_alarm = symbols(&exe).unwrap()["on_alarm"];
    let steps = &sim.traces[0].steps;
    // A return goes back to its caller; the handler starts after an asynchronous stop there.
    let into_handler = steps
        .iter()
        .filter(|s| s.kind == StepKind::Return && s.to == on_alarm)
        .count();
    assert_eq!(into_handler, 0, "returns into the signal handler");
    let after_return = steps
        .windows(2)
        .filter(|w| w[0].kind == StepKind::Return && matches!(w[1].kind, StepKind::Async { .. }))
        .filter(|w| w[1].from == w[0].to)
        .count();
    assert!(after_return >= 1, "no signal landed right after a return");
}
