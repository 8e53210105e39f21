//! The emulate backend scored against ptsim's true stacks on real programs: the same
//! qemu run gives both the events (ptscope's path: block log → events → segments writer)
//! and the truth (ptsim's derivation, named by perf from a genuine PT recording).

use ptscope_emulate::Events;
use ptscope_event::{Event, EventData, Kind, StringTable};
use ptscope_groundtruth::sim::{
    reconstruct_decoded, segments, thread_truths, Decoded, SimProgram, SCALE,
};
use ptscope_groundtruth::{score, Fidelity};
use std::path::Path;

/// Runs `argv` once under qemu and scores the emulate path's segments-writer stacks
/// against the truth of that run; `None` when qemu or perf is missing (outside CI).
fn score_program(name: &str, argv: &[&Path]) -> Option<(Fidelity, Decoded)> {
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
    let recon = reconstruct_decoded(&d, segments);
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
    Some((f, d))
}

fn calls_to(d: &Decoded, name: &str) -> usize {
    d.events
        .iter()
        .filter(|e| {
            matches!(e, Event::Ok { data: EventData::Trace { kind: Some(Kind::Call), dst, .. }, .. }
                if d.strings.display(dst.symbol) == name)
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
    let Some((f, d)) = score_program("leaf", &[&exe]) else {
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
    let Some((f, _)) = score_program("gzip", &[gz, Path::new("-kf"), &input]) else {
        return;
    };
    assert_exact(&f);
}

/// Known gap: 83 % exact, no invented frames — the segments writer's stack runs ahead of
/// the truth inside sqlite3's schema-reading recursion (`sqlite3_exec` → `sqlite3_prepare_v2`
/// again); not yet understood. Run with `--ignored`.
#[test]
#[ignore = "known gap: 83 % exact on sqlite3 (issue 14 follow-up)"]
fn sqlite3_is_exact() {
    if !ptsim::testing::tools_available(&["sqlite3"]) {
        return;
    }
    let sql = "create table t(a, b); insert into t values (1, 'x'), (2, 'y'), (3, 'z'); \
               select b, sum(a) from t group by b order by 2 desc;";
    let sq = Path::new("/usr/bin/sqlite3");
    let Some((f, _)) = score_program("sqlite3", &[sq, Path::new(":memory:"), Path::new(sql)])
    else {
        return;
    };
    assert_exact(&f);
}

/// Known gap: 42–47 % exact (varies with scheduling), no invented frames — goroutine
/// stack switches (`gogo`, `systemstack`) end frames without returns, and the segments
/// writer infers callers from the start of the trace for them. Run with `--ignored`.
#[test]
#[ignore = "known gap: ~45 % exact on Go (issue 14 follow-up)"]
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
    let Some((f, d)) = score_program("go", &[&exe]) else {
        return;
    };
    assert_exact(&f);
    assert_eq!(calls_to(&d, "main.leaf"), 300);
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
    let Some((f, d)) = score_program("threads", &[&exe]) else {
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
    let Some((f, d)) = score_program("c++", &[&exe]) else {
        return;
    };
    assert_exact(&f);
    assert_eq!(calls_to(&d, "thrower"), 30);
}
