//! Programs compiled here by real toolchains, each checked for what its source says it
//! does: C++ exceptions (g++), a Rust release binary without frame pointers (rustc), a Go
//! program (go build) and a C program with named threads (gcc).

use ptscope_realworld::harness::{can_record, record};
use ptscope_realworld::programs;
use ptscope_realworld::trace::{function_preds, same_function, Trace};

/// Panics unless the snapshot ends at the trigger: the hit of `trigger` is marked, and
/// nothing in the trace is later than `SLACK_S` after it, although the program then runs
/// `after` (0.6 s of thread CPU time), which a snapshot taken at exit would show whole.
fn assert_ends_at_trigger(t: &Trace, trigger: &str, after: &str) {
    const SLACK_S: f64 = 0.25;
    let hit = t
        .find(|n| n.starts_with(&format!("hit {trigger}")))
        .map(|(k, i)| k.slices[i].start)
        .min()
        .unwrap_or_else(|| panic!("no `hit {trigger}` marker in the trace: {}", t.summary()));
    let last = t
        .tracks
        .values()
        .flat_map(|k| k.slices.iter())
        .filter_map(|s| s.end)
        .max()
        .unwrap_or(hit);
    let late = last.saturating_sub(hit) as f64 / t.ticks_per_second() as f64;
    let after_slices = t.find(|n| n == after).count();
    assert!(
        late <= SLACK_S,
        "the trace goes on {late:.3} s after the trigger {trigger} was hit \
         ({after_slices} slices of {after}, which only runs after the trigger)"
    );
}

/// Panics unless `stderr` says the trigger fired.
fn assert_triggered(stderr: &str) {
    assert!(
        !stderr.contains("never fired"),
        "the trigger did not fire:\n{stderr}"
    );
}

#[test]
fn cpp_exceptions_dwarf() {
    let test = "cpp_exceptions_dwarf";
    if !can_record(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = programs::throw_cpp(test, dir.path()) else {
        return;
    };
    let (_, t) = record(
        dir.path(),
        "throw",
        &["--callgraph", "dwarf"],
        &[&exe, &"30000"],
    );
    // The throw, from the function that throws, called by its caller, called by main.
    t.assert_under("__cxa_throw", &["parse_field", "parse_record", "main"]);
    // The unwinder runs under the throw and calls the personality routine.
    t.assert_under("_Unwind_RaiseException", &["__cxa_throw", "parse_field"]);
    t.assert_under(
        "__gxx_personality_v0",
        &["_Unwind_RaiseException", "__cxa_throw"],
    );
    t.assert_process_named("throw");
}

#[test]
fn cpp_exceptions_fp_and_trigger() {
    let test = "cpp_exceptions_fp_and_trigger";
    if !can_record(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = programs::throw_cpp(test, dir.path()) else {
        return;
    };
    // Built with frame pointers: the program's own frames unwind with --callgraph fp.
    let (_, t) = record(dir.path(), "fp", &["--callgraph", "fp"], &[&exe, &"30000"]);
    t.assert_under("parse_field", &["parse_record", "main"]);

    let (run, trig) = record(
        dir.path(),
        "trigger",
        &["--trigger", "report_done"],
        &[&exe, &"30000"],
    );
    assert_triggered(&run.stderr());
    trig.assert_under("parse_field", &["parse_record", "main"]);
    assert_ends_at_trigger(&trig, "report_done", "after_parsing_work");
    t.assert_process_named("throw");
}

#[test]
fn rust_release_without_frame_pointers_dwarf() {
    let test = "rust_release_without_frame_pointers_dwarf";
    if !can_record(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = programs::nofp_rs(test, dir.path()) else {
        return;
    };
    let (_, t) = record(
        dir.path(),
        "nofp",
        &["--callgraph", "dwarf"],
        &[&exe, &"60"],
    );
    // Demangled Rust names, under the real callers, through std's runtime entry.
    t.assert_under(
        "nofp::checksum",
        &[
            "nofp::crunch",
            "nofp::main",
            "std::rt::lang_start_internal",
            "main",
        ],
    );
    t.assert_under("nofp::fill", &["nofp::crunch", "nofp::main"]);
    t.assert_process_named("nofp");
}

#[test]
fn go_fp_goroutines_on_threads() {
    let test = "go_fp_goroutines_on_threads";
    if !can_record(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = programs::collatz_go(test, dir.path()) else {
        return;
    };
    let (_, t) = record(
        dir.path(),
        "go-fp",
        &["--callgraph", "fp"],
        &[&exe, &"800000"],
    );
    // Go keeps frame pointers: full stacks up to the runtime's main. (main.collatz is a
    // frameless leaf: frame-pointer unwinding cannot see its caller main.work, so its
    // samples sit directly under main.main.)
    t.assert_under("main.work", &["main.main", "runtime.main"]);
    t.assert_under("main.collatz", &["main.main", "runtime.main"]);
    // Two goroutines busy at once (GOMAXPROCS is the CPU count, ≥ 2 here) run on two
    // OS threads: both threads' work is in the trace.
    if std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2) {
        let threads = t
            .tracks
            .values()
            .filter(|k| k.slices.iter().any(|s| s.name == "main.work"))
            .count();
        assert!(
            threads >= 2,
            "main.work ran on two threads but the trace has it on {threads}: {}",
            t.summary()
        );
    }
    t.assert_process_named("collatz");
}

#[test]
fn go_dwarf() {
    let test = "go_dwarf";
    if !can_record(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = programs::collatz_go(test, dir.path()) else {
        return;
    };
    // Go has no .eh_frame, so DWARF unwinding gets short stacks; the functions are named.
    let (_, t) = record(
        dir.path(),
        "go-dwarf",
        &["--callgraph", "dwarf"],
        &[&exe, &"400000"],
    );
    assert!(
        t.has("main.collatz"),
        "main.collatz missing: {}",
        t.summary()
    );
}

/// The three workers of threads.c, each on its named thread under its thread function
/// under glibc's `start_thread`. glibc's memcpy is an alias of its memmove: the symbol
/// table names it `__memmove_*` (perf's own inline lookup used DWARF's `__memcpy_*`).
fn check_named_workers(t: &Trace) {
    let workers: [(&str, &str, &[&str]); 3] = [
        ("hasher", "hash_block", &["hasher_main"]),
        ("sorter", "cmp_u32", &["sort_block", "sorter_main"]),
        (
            "copier",
            "__memcpy*|__memmove*",
            &["copy_block", "copier_main"],
        ),
    ];
    for (thread, leaf, callers) in workers {
        let mut outer: Vec<String> = callers.iter().map(|s| s.to_string()).collect();
        outer.push("start_thread".into());
        let preds = function_preds(&outer);
        let refs: Vec<&dyn Fn(&str) -> bool> = preds.iter().map(|b| b.as_ref()).collect();
        t.track_named(thread);
        t.assert_under_on(
            &format!("{leaf} under {} on thread {thread:?}", outer.join(" < ")),
            |k| k.thread_is(thread),
            |n| leaf.split('|').any(|l| same_function(n, l)),
            &refs,
        );
    }
}

#[test]
fn c_named_threads_dwarf() {
    let test = "c_named_threads_dwarf";
    if !can_record(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = programs::threads_c(test, dir.path()) else {
        return;
    };
    let (_, t) = record(dir.path(), "threads", &["--callgraph", "dwarf"], &[&exe]);
    t.assert_under("after_trigger_work", &["main"]);
    t.assert_process_named("threads");
    check_named_workers(&t);
}

#[test]
fn c_named_threads_fp_and_trigger() {
    let test = "c_named_threads_fp_and_trigger";
    if !can_record(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = programs::threads_c(test, dir.path()) else {
        return;
    };
    let (run, t) = record(
        dir.path(),
        "trigger",
        &["--callgraph", "fp", "--trigger", "phase_two"],
        &[&exe],
    );
    assert_triggered(&run.stderr());
    assert_ends_at_trigger(&t, "phase_two", "after_trigger_work");
    // The workers ran (and were joined) before the trigger, so their last moments are in
    // the snapshot, each on its named thread. (Frame pointers lose a leaf's caller and
    // stop at libc, so only the thread's own functions are asked for, at any depth.)
    for (thread, own) in [
        ("hasher", ["hash_block", "hasher_main"]),
        ("sorter", ["cmp_u32", "sort_block"]),
        ("copier", ["copy_block", "copier_main"]),
    ] {
        let track = t.track_named(thread);
        assert!(
            track
                .slices
                .iter()
                .any(|s| own.iter().any(|o| same_function(&s.name, o))),
            "none of {own:?} on thread {thread:?}: {}",
            t.summary()
        );
    }
}
