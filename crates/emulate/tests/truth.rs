//! The emulate backend scored against ptsim's true stacks on real programs: the same
//! qemu run gives both the events (ptscope's path: block log → events → segments writer)
//! and the truth (ptsim's derivation, named by perf from a genuine PT recording).

use ptscope_emulate::Events;
use ptscope_event::{Event, EventData, Kind, StringTable};
use ptscope_groundtruth::sim::{reconstruct_decoded, thread_truths, Decoded, SimProgram, SCALE};
use ptscope_groundtruth::{score, Fidelity, ReconThread, TimelineSink};
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::WriterConfig;
use std::path::Path;

/// The segments writer as `ptscope decode` configures it for an emulate recording: a
/// user-space trace starting at `earliest`, every event exactly timed.
fn emulate_segments(sink: TimelineSink, earliest: u64) -> SegmentsWriter<TimelineSink> {
    SegmentsWriter::new(
        sink,
        WriterConfig {
            earliest_time: earliest,
            exact_times: true,
            ..WriterConfig::default()
        },
    )
}

/// What one program's run gave: the score, the events, the writer's stacks.
struct Run {
    fidelity: Fidelity,
    decoded: Decoded,
    recon: Vec<ReconThread>,
}

/// Runs `argv` once under qemu and scores the emulate path's segments-writer stacks
/// against the truth of that run; `None` when qemu or perf is missing (outside CI).
fn score_program(name: &str, argv: &[&Path]) -> Option<Run> {
    if !ptsim::testing::tools_available(&["qemu-x86_64", "perf"]) {
        return None;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let prog = SimProgram::record(name, dir.path(), argv).expect("recording under qemu");
    let (traces, _) = ptsim::truth::derive(&prog.log, ptscope_emulate::KERNEL_INSNS);
    let maps: Vec<(u64, u64, String)> = prog
        .log
        .maps
        .iter()
        .flat_map(|s| s.entries.iter())
        .filter(|m| m.path.starts_with('/'))
        .map(|m| (m.start, m.end, m.path.clone()))
        .collect();
    let dso = |a: u64| {
        maps.iter()
            .rev()
            .find(|m| a >= m.0 && a < m.1)
            .map(|m| m.2.as_str())
    };
    let mut ev = Events::from_log(&prog.log, &prog.comm, StringTable::new(), &|c| c);
    // One instruction = 1 ns on both sides, so every step has its own instant.
    let mut timelines: Vec<_> = traces
        .iter()
        .map(|t| {
            let times: Vec<u64> = t.steps.iter().map(|s| s.clock * SCALE).collect();
            ptsim::stacks::timeline_at(t, &times, &prog.syms, &dso)
        })
        .collect();
    // Where perf has no symbol the truth names a function after its entry address; the
    // emulate path names it after its `.eh_frame` range (as ptscope's naming step does
    // on the other paths): compare the function each one means.
    for tl in &mut timelines {
        for piece in &mut tl.pieces {
            for frame in &mut piece.2 {
                if let Some(addr) = frame
                    .strip_prefix("[unknown @ 0x")
                    .and_then(|r| r.split(' ').next())
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
                {
                    *frame = ev.function_name(addr);
                }
            }
        }
    }
    let mut events = Vec::new();
    while let Some(e) = ev.next_event() {
        events.push(e);
    }
    let d = Decoded {
        events,
        strings: ev.into_strings(),
    };
    let truth = thread_truths(&timelines, &d);
    let recon = reconstruct_decoded(&d, emulate_segments);
    let f = score(&truth, &recon);
    if f.exact < 0.999 || f.phantom_frames > 0 {
        for (t, r) in truth.iter().zip(&recon) {
            for m in ptscope_groundtruth::score::mismatches(t, r, 5) {
                eprintln!("{name}: {m:?}");
            }
        }
        for p in f.phantoms.iter().take(10) {
            eprintln!("{name}: phantom {p:?}");
        }
    }
    eprintln!(
        "{name}: exact {:.5}, phantoms {}, frames {}, threads missing {}",
        f.exact, f.phantom_frames, f.frames, f.missing_threads
    );
    Some(Run {
        fidelity: f,
        decoded: d,
        recon,
    })
}

/// Slices of `callee` the writer opened right under a slice of `caller`, on any thread.
fn slices_under(recon: &[ReconThread], caller: &str, callee: &str) -> usize {
    let mut n = 0;
    for t in recon {
        for s in t.slices.iter().filter(|s| s.name == callee && s.depth > 0) {
            // The stack when the slice opened: the piece starting at its start that holds it.
            let parent = t
                .timeline
                .iter()
                .find(|p| p.0 <= s.start && s.start < p.1 && p.2.get(s.depth) == Some(&s.name))
                .and_then(|p| p.2.get(s.depth - 1));
            n += usize::from(parent.is_some_and(|p| p == caller));
        }
    }
    n
}

fn calls_to(d: &Decoded, name: &str) -> usize {
    d.events
        .iter()
        .filter(|e| {
            matches!(e, Event::Ok { data: EventData::Trace { kind: Some(Kind::Call), dst, .. }, .. }
                if d.strings.display(d.strings.location(*dst).symbol) == name)
        })
        .count()
}

fn assert_exact(f: &Fidelity) {
    assert!(f.exact >= 0.999, "exact {} < 99.9 %", f.exact);
    // perf names the PLT entries of a binary with a `.symtab` after `_init` (whose zero
    // size it stretches over `.plt`); the emulate path names them `printf@plt`, which is
    // what ran. Any other frame missing from the truth is invented.
    let invented: Vec<_> = f
        .phantoms
        .iter()
        .filter(|p| !p.name.ends_with("@plt"))
        .collect();
    assert!(
        invented.is_empty(),
        "invented frames: {:?}",
        &invented[..invented.len().min(5)]
    );
    assert_eq!(f.missing_threads, 0);
}

#[test]
fn tiny_leaf_called_many_times_is_exact() {
    if !ptsim::testing::tools_available(&["gcc"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let src = r#"
        #include <stdio.h>
        __attribute__((noinline)) int leaf(int x) { __asm__ volatile(""); return x + 1; }
        __attribute__((noinline)) int caller(int n) { int s = 0; for (int i = 0; i < n; i++) s = leaf(s); return s; }
        int main(void) { printf("%d\n", caller(777)); return 0; }
    "#;
    let exe = ptsim::testing::compile(dir.path(), "leaf", "leaf.c", src, &["gcc", "-O2", "-g"])
        .expect("compiling");
    let Some(Run {
        fidelity: f,
        decoded: d,
        ..
    }) = score_program("leaf", &[&exe])
    else {
        return;
    };
    assert_exact(&f);
    assert_eq!(calls_to(&d, "leaf"), 777);
    assert_eq!(calls_to(&d, "caller"), 1);
}

#[test]
fn gzip_is_exact() {
    if !ptsim::testing::tools_available(&["gzip"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let input = dir.path().join("in.txt");
    let text: String = (0..3000)
        .map(|i| format!("line {i} of some text\n"))
        .collect();
    std::fs::write(&input, text).expect("input");
    let gz = Path::new("/usr/bin/gzip");
    let Some(run) = score_program("gzip", &[gz, Path::new("-kf"), &input]) else {
        return;
    };
    assert_exact(&run.fidelity);
}

/// sqlite3 runs its statements through `sqlite3_exec`, which prepares each with
/// `sqlite3_prepare_v2`.
#[test]
fn sqlite3_is_exact() {
    if !ptsim::testing::tools_available(&["sqlite3"]) {
        return;
    }
    let sql = "create table t(a, b); insert into t values (1, 'x'), (2, 'y'), (3, 'z'); \
               select b, sum(a) from t group by b order by 2 desc;";
    let sq = Path::new("/usr/bin/sqlite3");
    let Some(run) = score_program("sqlite3", &[sq, Path::new(":memory:"), Path::new(sql)]) else {
        return;
    };
    assert_exact(&run.fidelity);
    let prepared = slices_under(&run.recon, "sqlite3_exec", "sqlite3_prepare_v2");
    assert!(
        prepared >= 1,
        "{prepared} sqlite3_prepare_v2 under sqlite3_exec"
    );
}

/// Go: the runtime's goroutine switches (`gogo`), stack switches (`systemstack`, `mcall`)
/// and sysmon's preemption signals, which land anywhere (right after a return or `gogo`'s
/// jump too, where the block log shows the handler as the branch's target) and make the
/// code resume in `runtime.asyncPreempt`. Where they land varies from run to run.
///
/// Not covered yet: user goroutines that park and resume (channels) score 97-98 %; the
/// truth stacks a resumed goroutine's frames on the scheduler's (`gogo`'s jump renames
/// the top frame), the writer does not, e.g. where a goroutine's function returns into
/// `runtime.goexit` (an address no call pushed).
#[test]
fn go_program_is_exact() {
    if !ptsim::testing::tools_available(&["go"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::write(
        dir.path().join("main.go"),
        "package main\nimport \"fmt\"\n//go:noinline\nfunc leaf(x int) int { return x + 1 }\n\
         func main() { s := 0; for i := 0; i < 300; i++ { s = leaf(s) }; fmt.Println(s) }\n",
    )
    .expect("source");
    std::fs::write(dir.path().join("go.mod"), "module leaf\ngo 1.19\n").expect("go.mod");
    let st = std::process::Command::new("go")
        .args(["build", "-o", "leaf", "."])
        .current_dir(dir.path())
        .status()
        .expect("go build");
    assert!(st.success());
    let exe = dir.path().join("leaf");
    let Some(run) = score_program("go", &[&exe]) else {
        return;
    };
    assert_exact(&run.fidelity);
    assert_eq!(calls_to(&run.decoded, "main.leaf"), 300);
    assert_eq!(slices_under(&run.recon, "main.main", "main.leaf"), 300);
}

#[test]
fn threads_are_exact() {
    if !ptsim::testing::tools_available(&["gcc"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let src = r#"
        #include <pthread.h>
        #include <stdio.h>
        __attribute__((noinline)) int work(int x) { __asm__ volatile(""); return x * 3; }
        void *run(void *a) { long s = 0; for (int i = 0; i < 200; i++) s += work(i); return (void *)s; }
        int main(void) {
            pthread_t t[3];
            for (int i = 0; i < 3; i++) pthread_create(&t[i], 0, run, 0);
            for (int i = 0; i < 3; i++) pthread_join(t[i], 0);
            puts("ok");
            return 0;
        }
    "#;
    let exe = ptsim::testing::compile(dir.path(), "thr", "thr.c", src, &["gcc", "-O2", "-pthread"])
        .expect("compiling");
    let Some(Run {
        fidelity: f,
        decoded: d,
        ..
    }) = score_program("threads", &[&exe])
    else {
        return;
    };
    assert_exact(&f);
    assert_eq!(calls_to(&d, "work"), 600);
}

#[test]
fn cpp_exceptions_are_exact() {
    if !ptsim::testing::tools_available(&["g++"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let src = r#"
        #include <stdexcept>
        #include <cstdio>
        __attribute__((noinline)) void thrower(int i) { if (i % 3 == 0) throw std::runtime_error("x"); }
        __attribute__((noinline)) int catcher(int i) { try { thrower(i); return 0; } catch (const std::exception &) { return 1; } }
        int main() { int n = 0; for (int i = 0; i < 30; i++) n += catcher(i); std::printf("%d\n", n); }
    "#;
    let exe = ptsim::testing::compile(dir.path(), "exc", "exc.cpp", src, &["g++", "-O2"])
        .expect("compiling");
    let Some(Run {
        fidelity: f,
        decoded: d,
        ..
    }) = score_program("c++", &[&exe])
    else {
        return;
    };
    assert_exact(&f);
    assert_eq!(calls_to(&d, "thrower"), 30);
}

/// A recursive parser whose every level has a cleanup, thrown from the deepest level and
/// caught in `main` (the real-world corpus's program, issue 25): each `_Unwind_Resume`
/// lands in the next outer level's pad, whether the pad jumps into a `.cold` part or not.
#[test]
fn cpp_recursive_cleanups_are_exact() {
    if !ptsim::testing::tools_available(&["g++"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let src = include_str!("../../../tests/realworld/programs/recursive_cleanups.cpp");
    let exe = ptsim::testing::compile(dir.path(), "rec", "rec.cpp", src, &["g++", "-O2"])
        .expect("compiling");
    let Some(Run {
        fidelity: f,
        decoded: d,
        ..
    }) = score_program("c++ recursive cleanups", &[&exe])
    else {
        return;
    };
    assert_exact(&f);
    // Every level's destructor ran: 7 + 11 + 3 + 7 levels for each of the two parsers,
    // the 11 and the last 7 on the way out of an exception.
    assert_eq!(calls_to(&d, "Level::~Level"), 56);
}

/// CPython runs a small script: the interpreter's C calls under their callers.
#[test]
fn python3_is_exact() {
    let py = Path::new("/usr/bin/python3");
    if !py.exists() {
        if std::env::var_os("CI").is_some() {
            panic!("/usr/bin/python3 is missing under CI");
        }
        eprintln!("skipping: /usr/bin/python3 is not installed");
        return;
    }
    let script = "def f(n):\n    return 1 if n < 2 else f(n - 1) + f(n - 2)\nprint(f(12))\n";
    let Some(run) = score_program(
        "python3",
        &[py, Path::new("-S"), Path::new("-c"), Path::new(script)],
    ) else {
        return;
    };
    assert_exact(&run.fidelity);
    assert_eq!(slices_under(&run.recon, "Py_BytesMain", "Py_RunMain"), 1);
    assert_eq!(
        slices_under(&run.recon, "PyRun_SimpleStringFlags", "PyRun_StringFlags"),
        1
    );
    assert!(slices_under(&run.recon, "PyEval_EvalCode", "_PyEval_EvalFrameDefault") >= 1);
}

/// A Rust program built with rustc: recursion, a closure passed to `sort_by`, and a panic
/// caught by `catch_unwind` (unwinding through Rust frames).
#[test]
fn rust_program_is_exact() {
    if !ptsim::testing::tools_available(&["rustc"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let src = r#"
        #[inline(never)]
        fn fib(n: u64) -> u64 { if n < 2 { 1 } else { fib(n - 1) + fib(n - 2) } }
        #[inline(never)]
        fn may_panic(i: u64) -> u64 { if i % 4 == 0 { panic!("no {i}") } i }
        fn main() {
            std::panic::set_hook(Box::new(|_| {}));
            let mut v: Vec<u64> = (0..50).map(|i| (i * 7919) % 101).collect();
            v.sort_by(|a, b| b.cmp(a));
            let caught = (0..8).filter(|&i| std::panic::catch_unwind(|| may_panic(i)).is_err()).count();
            println!("{} {} {}", fib(10), v[0], caught);
        }
    "#;
    let exe = ptsim::testing::compile(dir.path(), "rusty", "rusty.rs", src, &["rustc", "-O", "-g"])
        .expect("compiling");
    let Some(run) = score_program("rust", &[&exe]) else {
        return;
    };
    assert_exact(&run.fidelity);
    // One call of fib from main, the rest (as many as rustc left) from fib itself.
    let fibs = calls_to(&run.decoded, "rusty::fib");
    assert!(fibs > 10, "{fibs} calls of fib");
    assert_eq!(slices_under(&run.recon, "rusty::main", "rusty::fib"), 1);
    assert_eq!(
        slices_under(&run.recon, "rusty::fib", "rusty::fib"),
        fibs - 1
    );
    assert_eq!(calls_to(&run.decoded, "rusty::may_panic"), 8);
}
