//! `ptscope run --backend emulate` with triggers, `--multi-snapshot` and forked children,
//! on programs built here and run under real qemu-user with ptscope's plugin. Skips
//! loudly without qemu-x86_64 or gcc (fails in CI).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[path = "common/emulate.rs"]
mod emulate;
use emulate::{compile, plugin, run};

/// The transcript of the recording in `dir/rec`.
fn transcript(plugin: &Path, dir: &Path, exe: &str) -> String {
    emulate::transcript(plugin, dir, "rec", exe)
}

/// Runs `ptscope run --backend emulate -w rec -o out.fxt EXTRA -- PROG…`, expecting success
/// unless `may_fail`; gives stdout and stderr.
fn emulate(plugin: &Path, dir: &Path, extra: &[&str], prog: &[&str]) -> (String, String) {
    let _ = std::fs::remove_dir_all(dir.join("rec"));
    let mut args = vec!["run", "--backend", "emulate", "-w", "rec", "-o", "out.fxt"];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(prog);
    let out = run(plugin, dir, &args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "ptscope {args:?}: {err}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), err)
}

/// The transcript's `BEGIN` lines as `(function, its caller)`, by replaying BEGIN/END.
fn calls(t: &str) -> Vec<(String, String)> {
    let mut stack: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for l in t.lines() {
        if let Some(rest) = l.split("BEGIN ").nth(1) {
            let name = rest.trim_end_matches(" [inferred start time]").to_string();
            out.push((name.clone(), stack.last().cloned().unwrap_or_default()));
            stack.push(name);
        } else if l.contains("END   ") {
            stack.pop();
        }
    }
    out
}

/// Process name → the slice names in it, from an FXT file (every thread sits in a named
/// process).
fn processes(path: &Path) -> BTreeMap<String, BTreeSet<String>> {
    use ptscope_fxt::reader::{Reader, Record};
    let data = std::fs::read(path).expect("trace");
    let report = ptscope_fxt::check::validate_bytes(&data);
    assert!(report.is_ok(), "{report}");
    let mut names = BTreeMap::new();
    let mut slices: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for r in Reader::new(&data) {
        match r.expect("fxt record") {
            Record::KernelObject(k) if k.obj_type == 1 => {
                names.insert(k.koid, k.name.to_string());
            }
            Record::Event(e) => {
                slices.entry(e.pid).or_default().insert(e.name.to_string());
            }
            _ => {}
        }
    }
    slices
        .into_iter()
        .map(|(pid, s)| {
            let name = names
                .get(&pid)
                .unwrap_or_else(|| panic!("process {pid} has no name"))
                .clone();
            (name, s)
        })
        .collect()
}

/// `work` 1000 times, then `trigger_here` HITS times (argv[1], default 1) each after
/// 1000 more `work`s, then 500 `work`s and `after`s.
const TRIG: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) int work(int x) { __asm__ volatile(""); return x * 3 + 1; }
__attribute__((noinline)) void trigger_here(int i) { __asm__ volatile(""); }
__attribute__((noinline)) int after(int x) { __asm__ volatile(""); return x + 7; }
int main(int argc, char **argv) {
  int s = 0, hits = argc > 1 ? atoi(argv[1]) : 1;
  for (int h = 0; h < hits; h++) {
    for (int i = 0; i < 1000; i++) s = work(s);
    trigger_here(h);
  }
  for (int i = 0; i < 500; i++) s = after(work(s));
  printf("%d\n", s);
  return 0;
}
"#;

/// The names of the `BEGIN` lines, in order.
fn begins(t: &str) -> Vec<String> {
    calls(t).into_iter().map(|c| c.0).collect()
}

#[test]
fn the_trace_ends_at_the_trigger_functions_entry() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    // Debian's gcc builds a PIE: qemu loads it at an address ptscope does not know.
    compile(dir.path(), "trig", TRIG, &[]);
    // Stopping at the hit keeps the ring's contents, or everything up to it.
    for extra in [&[][..], &["--full-execution"]] {
        let mut args = vec!["--trigger", "trigger_here"];
        args.extend_from_slice(extra);
        let (stdout, err) = emulate(&plugin, dir.path(), &args, &["./trig"]);
        // The program ran to its end.
        assert!(!stdout.trim().is_empty(), "{extra:?}: {err}");
        assert!(
            err.contains("trigger hit (trigger_here at 0x"),
            "{extra:?}: {err}"
        );
        assert!(!err.contains("never fired"), "{extra:?}: {err}");
        let t = transcript(&plugin, dir.path(), "trig");
        let b = begins(&t);
        assert_eq!(
            b.last().map(String::as_str),
            Some("trigger_here"),
            "{:?}",
            &b[b.len().saturating_sub(5)..]
        );
        // All the calls before the hit, none after it.
        assert_eq!(b.iter().filter(|n| *n == "work").count(), 1000);
        assert!(
            !b.iter().any(|n| n == "after"),
            "calls after the hit are in the trace"
        );
        assert!(calls(&t).contains(&("trigger_here".into(), "main".into())));
    }
}

#[test]
fn a_trigger_that_never_fires_says_so_and_keeps_the_whole_run() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(dir.path(), "trig", TRIG, &[]);
    let (_, err) = emulate(
        &plugin,
        dir.path(),
        &["--trigger", "trigger_here"],
        &["./trig", "0"],
    );
    assert!(err.contains("the trigger never fired"), "{err}");
    assert!(!err.contains("trigger hit"), "{err}");
    let b = begins(&transcript(&plugin, dir.path(), "trig"));
    assert_eq!(b.iter().filter(|n| *n == "after").count(), 500);
}

#[test]
fn multi_snapshot_takes_one_snapshot_per_hit_each_ending_there() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(dir.path(), "trig", TRIG, &[]);
    for size in ["8K", "64M"] {
        let (_, err) = emulate(
            &plugin,
            dir.path(),
            &[
                "--trigger",
                "trigger_here",
                "--multi-snapshot",
                "--snapshot-size",
                size,
            ],
            &["./trig", "3"],
        );
        assert!(err.contains("snapshot 3"), "{err}");
        assert!(!err.contains("snapshot 4"), "{err}");
        let t = transcript(&plugin, dir.path(), "trig");
        let lines: Vec<&str> = t.lines().filter(|l| l.contains("BEGIN ")).collect();
        let hits: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].ends_with("BEGIN trigger_here"))
            .collect();
        assert_eq!(hits.len(), 3, "{size}: {} hits", hits.len());
        // Each snapshot ends at its hit: what follows a hit is the next snapshot's start.
        for &i in &hits {
            if let Some(next) = lines.get(i + 1) {
                assert!(next.contains("[inferred start time]"), "{size}: {next}");
            }
        }
        assert_eq!(hits.last(), Some(&(lines.len() - 1)), "{size}");
        let works = lines.iter().filter(|l| l.ends_with("BEGIN work")).count();
        // Snapshots do not overlap; 8 KiB rings hold only part of each stretch.
        if size == "64M" {
            assert_eq!(works, 3000, "{size}");
        } else {
            assert!(
                (300..3000).contains(&works),
                "{size}: {works} calls of work"
            );
        }
        assert!(!lines.iter().any(|l| l.ends_with("BEGIN after")), "{size}");
    }
}

/// A thread calls `busy` until main has hit `trigger_here` three times, then `late`;
/// main starts once the thread has called `busy` a thousand times.
const THREADED: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
static atomic_int done, warm;
__attribute__((noinline)) int busy(int x) { __asm__ volatile(""); return x + 1; }
__attribute__((noinline)) int late(int x) { __asm__ volatile(""); return x + 2; }
__attribute__((noinline)) int work(int x) { __asm__ volatile(""); return x * 3 + 1; }
__attribute__((noinline)) void trigger_here(int i) { __asm__ volatile(""); }
static void *spin(void *a) {
  int s = 0;
  while (!atomic_load(&done)) { s = busy(s); if (s == 1000) atomic_store(&warm, 1); }
  for (int i = 0; i < 1000; i++) s = late(s);
  return (void *)(long)s;
}
int main(void) {
  pthread_t t; pthread_create(&t, 0, spin, 0);
  while (!atomic_load(&warm)) ;
  int s = 0;
  for (int h = 0; h < 3; h++) { for (int i = 0; i < 3000; i++) s = work(s); trigger_here(h); }
  atomic_store(&done, 1);
  for (int i = 0; i < 3000; i++) s = work(s);
  pthread_join(t, 0);
  printf("%d\n", s); return 0;
}
"#;

#[test]
fn snapshots_of_a_threaded_program_hold_every_thread_up_to_the_hit() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(dir.path(), "thr", THREADED, &["-pthread"]);
    for extra in [&["--multi-snapshot"][..], &[]] {
        let mut args = vec!["--trigger", "trigger_here", "--snapshot-size", "64K"];
        args.extend_from_slice(extra);
        let (_, err) = emulate(&plugin, dir.path(), &args, &["./thr"]);
        let b = begins(&transcript(&plugin, dir.path(), "thr"));
        let hits = b.iter().filter(|n| *n == "trigger_here").count();
        assert_eq!(
            hits,
            if extra.is_empty() { 1 } else { 3 },
            "{extra:?}: {err}"
        );
        // The other thread ran all along; what it did after the (last) hit is not shown.
        let busy = b.iter().filter(|n| *n == "busy").count();
        assert!(busy > 100, "{extra:?}: {busy} calls of busy");
        assert!(
            !b.iter().any(|n| n == "late"),
            "{extra:?}: calls after the hit"
        );
    }
}

/// A shared library's function as the trigger.
const LIB: &str = r#"
__attribute__((noinline)) void lib_trigger(int i) { __asm__ volatile(""); }
__attribute__((noinline)) int lib_work(int x) { __asm__ volatile(""); return x + 5; }
"#;

const USES_LIB: &str = r#"
#include <stdio.h>
void lib_trigger(int i);
int lib_work(int x);
int main(void) {
  int s = 0;
  for (int i = 0; i < 200; i++) s = lib_work(s);
  lib_trigger(s);
  for (int i = 0; i < 300; i++) s = lib_work(s) + 1;
  printf("%d\n", s);
  return 0;
}
"#;

#[test]
fn a_trigger_in_a_shared_library_fires_at_its_entry() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(dir.path(), "libtrig.so", LIB, &["-shared", "-fPIC"]);
    compile(
        dir.path(),
        "uselib",
        USES_LIB,
        &["-L.", "-ltrig", "-Wl,-rpath,$ORIGIN"],
    );
    let (stdout, err) = emulate(
        &plugin,
        dir.path(),
        &["--trigger", "lib_trigger"],
        &["./uselib"],
    );
    assert!(!stdout.trim().is_empty(), "{err}");
    assert!(err.contains("trigger hit (lib_trigger at 0x"), "{err}");
    assert!(
        err.contains("libtrig.so"),
        "the trigger's file is named: {err}"
    );
    let b = begins(&transcript(&plugin, dir.path(), "uselib"));
    assert_eq!(b.last().map(String::as_str), Some("lib_trigger"));
    assert_eq!(b.iter().filter(|n| *n == "lib_work").count(), 200);
}

/// Two children, each calling its own function through its own caller; the parent
/// waits. With an argument the first child crashes after its calls.
const FORK: &str = r#"
#include <stdio.h>
#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>
__attribute__((noinline)) int child_one(int x) { __asm__ volatile(""); return x + 1; }
__attribute__((noinline)) int child_two(int x) { __asm__ volatile(""); return x + 2; }
__attribute__((noinline)) int run_one(int n) { int s = 0; for (int i = 0; i < n; i++) s = child_one(s); return s; }
__attribute__((noinline)) int run_two(int n) { int s = 0; for (int i = 0; i < n; i++) s = child_two(s); return s; }
__attribute__((noinline)) void crash_here(int s) { if (s) raise(SIGSEGV); }
__attribute__((noinline)) int parent_work(int x) { __asm__ volatile(""); return x + 3; }
int main(int argc, char **argv) {
  pid_t a = fork();
  if (a == 0) { int s = run_one(300); if (argc > 1) crash_here(s); _exit(0); }
  pid_t b = fork();
  if (b == 0) _exit(run_two(400) & 1);
  int s = 0;
  for (int i = 0; i < 100; i++) s = parent_work(s);
  int st1, st2;
  waitpid(a, &st1, 0); waitpid(b, &st2, 0);
  printf("%d %d\n", WIFSIGNALED(st1), s);
  return 0;
}
"#;

/// Checks that each child's calls are in its own process, under the right caller.
fn check_children(plugin: &Path, dir: &Path, what: &str) {
    let t = transcript(plugin, dir, "fork");
    let c = calls(&t);
    let count = |f: &str, caller: &str| c.iter().filter(|(n, p)| n == f && p == caller).count();
    assert_eq!(count("child_one", "run_one"), 300, "{what}");
    assert_eq!(count("child_two", "run_two"), 400, "{what}");
    assert_eq!(count("parent_work", "main"), 100, "{what}");
    let procs = processes(&dir.join("out.fxt"));
    let holding = |f: &str| -> Vec<&String> {
        procs
            .iter()
            .filter(|(_, s)| s.contains(f))
            .map(|(p, _)| p)
            .collect()
    };
    let (one, two, parent) = (
        holding("child_one"),
        holding("child_two"),
        holding("parent_work"),
    );
    assert_eq!(one.len(), 1, "{what}: {procs:?}");
    assert_eq!(two.len(), 1, "{what}: {procs:?}");
    assert_eq!(parent.len(), 1, "{what}: {procs:?}");
    assert!(
        one[0] != two[0] && one[0] != parent[0] && two[0] != parent[0],
        "{what}: each process is its own: {one:?} {two:?} {parent:?}"
    );
    for p in [one[0], two[0], parent[0]] {
        assert!(
            p.starts_with("fork [pid="),
            "{what}: processes are named: {p}"
        );
    }
    // Child logs are private files beside the first one.
    use std::os::unix::fs::PermissionsExt;
    let logs: Vec<_> = std::fs::read_dir(dir.join("rec"))
        .expect("rec")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("emulate-blocks-")
        })
        .collect();
    assert_eq!(logs.len(), 2, "{what}");
    for l in logs {
        let mode = l.metadata().expect("meta").permissions().mode();
        assert_eq!(mode & 0o077, 0, "{what}: {:?} is mode {mode:o}", l.path());
    }
}

#[test]
fn forked_children_are_traced_as_their_own_processes() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(dir.path(), "fork", FORK, &[]);
    emulate(&plugin, dir.path(), &[], &["./fork"]);
    check_children(&plugin, dir.path(), "ring");
    emulate(&plugin, dir.path(), &["--full-execution"], &["./fork"]);
    check_children(&plugin, dir.path(), "full execution");
}

#[test]
fn a_crashing_child_keeps_its_last_moments() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(dir.path(), "fork", FORK, &[]);
    let (stdout, err) = emulate(&plugin, dir.path(), &[], &["./fork", "crash"]);
    assert!(
        stdout.starts_with("1 "),
        "the child crashed: {stdout} {err}"
    );
    check_children(&plugin, dir.path(), "crash");
    let c = calls(&transcript(&plugin, dir.path(), "fork"));
    assert!(
        c.contains(&("crash_here".into(), "main".into())),
        "the crash site is in the child's trace"
    );
}

/// Debian's python3 forks: CPython's after-fork hooks run in the process they are for.
const PY_FORK: &str = "import os
pid = os.fork()
if pid == 0:
    os._exit(7)
print(os.waitpid(pid, 0)[1] >> 8)";

#[test]
fn python_forks_and_each_process_runs_its_own_after_fork_hook() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let (stdout, err) = emulate(
        &plugin,
        dir.path(),
        &[],
        &["/usr/bin/python3", "-c", PY_FORK],
    );
    assert_eq!(stdout.trim(), "7", "{err}");
    let procs = processes(&dir.path().join("out.fxt"));
    let holding = |f: &str| -> Vec<&String> {
        procs
            .iter()
            .filter(|(_, s)| s.contains(f))
            .map(|(p, _)| p)
            .collect()
    };
    let child = holding("PyOS_AfterFork_Child");
    let parent = holding("PyOS_AfterFork_Parent");
    assert_eq!(child.len(), 1, "{:?}", procs.keys());
    assert_eq!(parent.len(), 1, "{:?}", procs.keys());
    assert_ne!(child[0], parent[0]);
    assert!(child[0].starts_with("python3 [pid="), "{}", child[0]);
    // Both processes ran the interpreter before the fork: the child's trace starts there.
    assert!(holding("PyOS_BeforeFork").contains(&parent[0]));
    // A trigger in the child: the snapshot is the child's, ending at the hook's entry.
    let (_, err) = emulate(
        &plugin,
        dir.path(),
        &["--trigger", "PyOS_AfterFork_Child"],
        &["/usr/bin/python3", "-c", PY_FORK],
    );
    assert!(
        err.contains("trigger hit (PyOS_AfterFork_Child at 0x"),
        "{err}"
    );
    let b = begins(&transcript(&plugin, dir.path(), "/usr/bin/python3"));
    assert_eq!(b.last().map(String::as_str), Some("PyOS_AfterFork_Child"));
    assert!(!b.iter().any(|n| n == "PyOS_AfterFork_Parent"));
}

/// Line 8's first instruction is in the middle of a block (the one starting where
/// `work` returns to).
const LINE: &str = r#"#include <stdio.h>
__attribute__((noinline)) int work(int x) { return x * 3 + 1; }
__attribute__((noinline)) int after(int x) { return x + 7; }
int main(void) {
  int s = 0;
  for (int i = 0; i < 100; i++) s = work(s);
  s = work(s);
  s += 5;
  s = after(s);
  for (int i = 0; i < 100; i++) s = after(s);
  printf("%d\n", s);
  return 0;
}
"#;

#[test]
fn a_line_trigger_inside_a_block_fires_there() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(dir.path(), "line", LINE, &["-O0", "-g"]);
    let (_, err) = emulate(&plugin, dir.path(), &["--trigger", "line.c:8"], &["./line"]);
    assert!(
        err.contains("trigger hit (") && err.contains("line.c:8 at 0x"),
        "{err}"
    );
    let b = begins(&transcript(&plugin, dir.path(), "line"));
    assert_eq!(b.iter().filter(|n| *n == "work").count(), 101);
    // The block holding the line ends with the call of `after`: at most that one shows.
    assert!(b.iter().filter(|n| *n == "after").count() <= 1, "{b:?}");
}

/// The child outlives its parent: the recording waits for it.
const ORPHAN: &str = r#"
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) int child_work(int x) { __asm__ volatile(""); return x + 1; }
int main(void) {
  if (fork() == 0) {
    usleep(300000);
    int s = 0;
    for (int i = 0; i < 500; i++) s = child_work(s);
    _exit(s & 1);
  }
  puts("parent done");
  return 0;
}
"#;

#[test]
fn a_child_that_outlives_the_program_is_waited_for() {
    let Some(plugin) = plugin() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    compile(dir.path(), "orphan", ORPHAN, &[]);
    let (_, err) = emulate(&plugin, dir.path(), &[], &["./orphan"]);
    assert!(err.contains("waiting for the child processes"), "{err}");
    let b = begins(&transcript(&plugin, dir.path(), "orphan"));
    assert_eq!(b.iter().filter(|n| *n == "child_work").count(), 500);
}
