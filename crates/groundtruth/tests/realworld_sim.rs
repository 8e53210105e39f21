//! Issue 11's real-world corpus on simulated Intel PT: programs nobody here wrote (Debian's
//! python3, gzip, sort, sqlite3, git, dash) and programs built here in C, C++, Rust and Go,
//! each run once under `ptsim` (QEMU + a genuine PT `perf.data`), decoded by ptscope
//! through `perf script` text *and* through the dlfilter, fed to both stack writers
//! (legacy and segments) and scored against the true stacks (`ptscope_groundtruth::sim`).
//!
//! Most runs are small (short inputs) because CI runs this unoptimised; gzip (100 KiB of
//! input) and python3 (a whole interpreter run) are ~2 M events each, which the scorer
//! holds in a few handles per stack change (`ptscope_groundtruth::names`).
//! Figures (events, exact, root, phantoms) go to stderr (`--nocapture`); FIDELITY.md,
//! "Real programs (issue 11 corpus)", tabulates them.

use ptscope_groundtruth::sim::{SimProgram, SimScore};
use ptsim::testing::{compile, tools_available};
use ptsim::SimConfig;
use std::path::{Path, PathBuf};

fn pct(x: f64) -> f64 {
    100.0 * x
}

/// What a recording must reach. Floors are measured figures held (with the known cause
/// where they are below 99.9 %), not wishes.
#[derive(Clone, Copy, Debug)]
struct Floor {
    /// Minimum segments exact share (0..1).
    exact: f64,
    /// Minimum segments suffix share (0..1): the measure for a snapshot, whose root
    /// (`_start`, never returning) is before the buffer, so exact is 0 by construction.
    suffix: f64,
    /// Minimum segments root share (0..1).
    root: f64,
    /// Why segments may score below legacy on this program (a known weakness, measured
    /// and held, not fixed here); `None`: segments must be at least legacy in exact and
    /// root.
    below_legacy: Option<&'static str>,
}

/// Full recording: the whole execution is in the trace.
const FULL: Floor = Floor {
    exact: 0.999,
    suffix: 0.999,
    root: 0.999,
    below_legacy: None,
};

/// sort and sqlite3 (Debian, stripped PIE): measured segments 0.00 % exact (1.2 % / 2.2 %
/// suffix) against legacy's 99.1 % / 99.5 %, identical over runs (before ptsim's truth
/// followed call/return pairing in stripped recursion, issue 15: segments 0.66 % / 0.12 %,
/// legacy 70.6 % / 75.3 %). Code without a symbol is named per address
/// (`[unknown @ ADDR (DSO)]`), so each return renames the caller's frame after its return
/// address. In a recursion (sort's merge sort, sqlite's tree code) the same return address
/// then names several frames, and a later return landing there matches an *outer* one:
/// segments takes it as a long return (exception, `longjmp`) and drops the frames between.
/// The returns that follow go above the segment's root and are learnt as callers of the
/// whole segment. No frame is invented (each name is on some true stack), so the phantom
/// check passes. gzip, stripped too but without recursion in what ran, is exact. A writer
/// weakness, held as found (not fixed by this test).
const STRIPPED_LATE_CALLERS: Floor = Floor {
    exact: 0.0,
    suffix: 0.005,
    root: 0.0,
    below_legacy: Some("stripped recursion: a return matched to an outer same-named frame"),
};

/// dash: its SIGCHLD handler, delivered as `wait4` returns, runs on top of `wait4` in the
/// truth (issue 15) but replaces it in both writers, which also miss `wait4` under the
/// trampoline's `rt_sigreturn`: measured 94.9-95.4 % segments exact (legacy 93.7-94.3 %)
/// when the signal lands at the syscall's return. A writer weakness, held as found.
const SIGNAL_AT_SYSCALL_RETURN: Floor = Floor {
    exact: 0.94,
    suffix: 0.94,
    root: 0.999,
    below_legacy: None,
};

/// A snapshot of the last `bytes` of each thread's trace (PSB every 4 KiB).
fn snapshot(bytes: usize) -> SimConfig {
    let mut c = SimConfig {
        snapshot_size: Some(bytes),
        ..SimConfig::default()
    };
    c.pt.psb_period = 4096;
    c
}

/// True when every file exists; else skips loudly (fails under `CI`).
fn files_available(files: &[&str]) -> bool {
    let missing: Vec<&str> = files
        .iter()
        .copied()
        .filter(|f| !Path::new(f).is_file())
        .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("required programs missing under CI: {missing:?} (see scripts/test)");
    }
    eprintln!("skipping: not installed: {missing:?}");
    false
}

/// Deterministic text of about `len` bytes (words from a small vocabulary, a xorshift
/// stream choosing them): compressible and sortable like real text, the same every run.
fn text(len: usize) -> String {
    const WORDS: [&str; 16] = [
        "alpha", "branch", "call", "decode", "event", "frame", "gap", "heap", "inline", "jump",
        "kernel", "leaf", "mmap", "packet", "return", "stack",
    ];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut s = String::with_capacity(len + 16);
    let mut n = 0;
    while s.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(WORDS[(x % 16) as usize]);
        n += 1;
        s.push(if n % 9 == 0 { '\n' } else { ' ' });
    }
    s.push('\n');
    s
}

fn report(s: &SimScore) {
    let (t, l, g) = (&s.text, &s.text.legacy, &s.text.segments);
    eprintln!(
        "REALWORLD | {} | {} | {} | {} threads | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} |",
        s.program,
        s.variant,
        t.events,
        t.threads,
        t.errors,
        if s.paths_identical() { "yes" } else { "NO" },
        pct(l.exact),
        pct(g.exact),
        pct(l.suffix_correct),
        pct(g.suffix_correct),
        pct(l.root_correct),
        pct(g.root_correct),
        l.phantom_frames,
        g.phantom_frames
    );
}

/// Records `argv` (run in `dir`'s files; absolute paths) once, scores `variant` through
/// both decoders and both writers, and checks the result against `floor`.
fn check(
    name: &str,
    dir: &Path,
    argv: &[&Path],
    variant: &str,
    cfg: &SimConfig,
    floor: Floor,
) -> SimScore {
    check_variants(name, dir, argv, &[(variant, cfg.clone(), floor)]).remove(0)
}

/// [`check`] for several variants of one recording (the program runs once).
fn check_variants(
    name: &str,
    dir: &Path,
    argv: &[&Path],
    variants: &[(&str, SimConfig, Floor)],
) -> Vec<SimScore> {
    let t0 = std::time::Instant::now();
    let prog = SimProgram::record(name, dir, argv)
        .unwrap_or_else(|e| panic!("{name}: recording failed: {e:#}"));
    eprintln!("  {name}: recorded in {:.1} s", t0.elapsed().as_secs_f64());
    variants
        .iter()
        .map(|(variant, cfg, floor)| {
            let t0 = std::time::Instant::now();
            let s = prog
                .score(variant, cfg)
                .unwrap_or_else(|e| panic!("{name} {variant}: decoding or scoring failed: {e:#}"));
            verify(name, variant, s, *floor, t0)
        })
        .collect()
}

/// Reports `s` and checks it against `floor`.
fn verify(
    name: &str,
    variant: &str,
    s: SimScore,
    floor: Floor,
    t0: std::time::Instant,
) -> SimScore {
    report(&s);
    eprintln!("  {name}: {:.1} s", t0.elapsed().as_secs_f64());
    // REALWORLD_DEBUG=N: the first N mismatching intervals of segments per thread.
    if let Some(n) = std::env::var("REALWORLD_DEBUG")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        for p in s.text.segments.phantoms.iter().take(n) {
            eprintln!("  segments phantom {p:?}");
        }
        let d = s.detail.as_ref().expect("score_detailed keeps the detail");
        for t in &d.truth {
            if let Some(r) = d.recon.1.iter().find(|r| r.thread == t.thread) {
                for m in ptscope_groundtruth::score::mismatches_interned(t, r, &d.names, n) {
                    eprintln!(
                        "  {:?} {}..{}\n    truth {:?}\n    recon {:?}",
                        t.thread, m.start, m.end, m.truth, m.recon
                    );
                }
            }
        }
    }
    let mut failures: Vec<String> = Vec::new();
    let (l, g) = (&s.text.legacy, &s.text.segments);
    // Both decode paths must hand the writers the same trace.
    if s.text.events != s.dlfilter.events || s.text.errors != s.dlfilter.errors {
        failures.push(format!(
            "{} events ({} errors) through text, {} ({}) through the dlfilter",
            s.text.events, s.text.errors, s.dlfilter.events, s.dlfilter.errors
        ));
    }
    if !s.paths_identical() || s.text.legacy != s.dlfilter.legacy || *g != s.dlfilter.segments {
        failures.push("text and dlfilter paths rebuilt different stacks".into());
    }
    if s.text.events < 1000 || g.covered_ns == 0 {
        failures.push(format!("only {} events scored", s.text.events));
    }
    if s.text.errors != 0 {
        failures.push(format!(
            "{} decode errors in a fault-free recording",
            s.text.errors
        ));
    }
    if g.missing_threads != 0 {
        failures.push(format!("{} threads without a track", g.missing_threads));
    }
    if floor.below_legacy.is_none() && (g.exact < l.exact || g.root_correct < l.root_correct) {
        failures.push(format!(
            "segments below legacy: exact {:.4} < {:.4} or root {:.4} < {:.4}",
            g.exact, l.exact, g.root_correct, l.root_correct
        ));
    }
    if g.exact < floor.exact || g.suffix_correct < floor.suffix || g.root_correct < floor.root {
        failures.push(format!(
            "segments exact {:.4} / suffix {:.4} / root {:.4} below the floor {floor:?}",
            g.exact, g.suffix_correct, g.root_correct
        ));
    }
    // As in `simulated.rs`: a function without a symbol is named by its entry in the
    // truth, but a writer that only sees a return into it can name it only by that
    // address; such inferred frames are a naming limit, not an invented frame.
    let real: Vec<_> = g
        .phantoms
        .iter()
        .filter(|p| !(p.inferred && p.name.starts_with("[unknown @ ")))
        .collect();
    if !real.is_empty() {
        failures.push(format!(
            "{} segments phantom frames, e.g. {:?}",
            real.len(),
            &real[..real.len().min(3)]
        ));
    }
    assert!(failures.is_empty(), "{name} {variant}: {failures:#?}");
    s
}

/// Threads the truth scored (one per traced thread).
fn threads(s: &SimScore) -> usize {
    s.text.threads
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ptscope-realworld-")
        .tempdir()
        .expect("cannot create a temporary directory")
}

fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, contents).expect("cannot write test input");
    p
}

fn qemu_perf() -> bool {
    tools_available(&["qemu-x86_64", "perf"])
}

#[test]
fn python3_script() {
    if !qemu_perf() || !files_available(&["/usr/bin/python3"]) {
        return;
    }
    let d = scratch();
    let script = write(
        d.path(),
        "fib.py",
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nx = [fib(k) for k in range(12)]\n",
    );
    // Interpreter startup alone is ~1.8 M branches: the whole run is scored, and a
    // snapshot of its last 64 KiB (~34 k events: the script and the shutdown).
    let argv = [
        Path::new("/usr/bin/python3"),
        Path::new("-I"),
        Path::new("-S"),
        &script,
    ];
    // python3.11 is stripped to its exported symbols, and the writers' per-address names
    // meet the same recursion weakness as sort's (below). The truth is right since issue
    // 15 (ptsim's `debian_python3_recursion` checks it against a shadow stack; before, it
    // lost `_start > … > Py_BytesMain` for good and both writers scored 0.3 %).
    let stripped = "stripped recursion in the writers (as sort)";
    let scores = check_variants(
        "python3",
        d.path(),
        &argv,
        &[
            // Measured (release and debug, 1.85 M events): legacy 95.0 % exact, 100 % root;
            // segments 0.00 % exact and root, 6.9 % suffix, 2-3 phantoms (inferred
            // `[unknown @ …]` only).
            (
                "full",
                SimConfig::default(),
                Floor {
                    exact: 0.0,
                    suffix: 0.05,
                    root: 0.0,
                    below_legacy: Some(stripped),
                },
            ),
            // Measured 0 % exact and root (a snapshot: its root is before the buffer), ~2 %
            // suffix for both writers, and no floor held. Pipeline checks (decode, text =
            // dlfilter, phantoms) still hold.
            (
                "snapshot",
                snapshot(64 << 10),
                Floor {
                    exact: 0.0,
                    suffix: 0.0,
                    root: 0.0,
                    below_legacy: Some(stripped),
                },
            ),
        ],
    );
    // The whole run is what the scorer could not hold before interning (24 GB at 8.4 M
    // events): here it is scored, startup included.
    assert!(
        scores[0].text.events > 1_000_000,
        "the full python3 run has only {} events",
        scores[0].text.events
    );
}

#[test]
fn gzip_text() {
    if !qemu_perf() || !files_available(&["/usr/bin/gzip"]) {
        return;
    }
    let d = scratch();
    // 100 KiB: ~1.9 M events (the scorer holds a few handles per stack change).
    let input = write(d.path(), "in.txt", &text(100 << 10));
    check(
        "gzip",
        d.path(),
        &[Path::new("/usr/bin/gzip"), Path::new("-k"), &input],
        "full",
        &SimConfig::default(),
        FULL,
    );
}

#[test]
fn sort_text() {
    if !qemu_perf() || !files_available(&["/usr/bin/sort"]) {
        return;
    }
    let d = scratch();
    let input = write(d.path(), "in.txt", &text(8 << 10));
    let out = d.path().join("sorted.txt");
    check(
        "sort",
        d.path(),
        &[Path::new("/usr/bin/sort"), Path::new("-o"), &out, &input],
        "full",
        &SimConfig::default(),
        STRIPPED_LATE_CALLERS,
    );
}

#[test]
fn sqlite3_queries() {
    if !qemu_perf() || !files_available(&["/usr/bin/sqlite3"]) {
        return;
    }
    let d = scratch();
    let db = d.path().join("t.db");
    check(
        "sqlite3",
        d.path(),
        &[
            Path::new("/usr/bin/sqlite3"),
            &db,
            Path::new(
                "create table t(k integer primary key, v text); \
                 insert into t(v) select 'row' || value from generate_series(1, 50); \
                 select count(*), max(k) from t where v like 'row1%';",
            ),
        ],
        "full",
        &SimConfig::default(),
        STRIPPED_LATE_CALLERS,
    );
}

#[test]
fn git_hash_object() {
    if !qemu_perf() || !files_available(&["/usr/bin/git"]) {
        return;
    }
    let d = scratch();
    let input = write(d.path(), "blob.txt", &text(4 << 10));
    check(
        "git",
        d.path(),
        &[
            Path::new("/usr/bin/git"),
            Path::new("hash-object"),
            Path::new("--no-filters"),
            &input,
        ],
        "full",
        &SimConfig::default(),
        FULL,
    );
}

#[test]
fn cpp_throw() {
    if !qemu_perf() || !tools_available(&["g++"]) {
        return;
    }
    let d = scratch();
    let exe = compile(
        d.path(),
        "throw",
        "throw.cc",
        r#"
#include <cstdio>
#include <stdexcept>
#include <string>
struct Guard { std::string s; ~Guard() { std::fputs("", stdout); } };
__attribute__((noinline)) int parse(int i) {
    Guard g{"cleanup"};
    if (i % 2) throw std::invalid_argument("odd");
    return i;
}
__attribute__((noinline)) int layer(int i) { return parse(i) + 1; }
int main() {
    int ok = 0, bad = 0;
    for (int i = 0; i < 4; i++) {
        try { ok += layer(i); } catch (const std::exception &) { bad++; }
    }
    std::printf("%d %d\n", ok, bad);
}
"#,
        &["g++", "-O1"],
    )
    .unwrap();
    check(
        "c++ throw",
        d.path(),
        &[&exe],
        "full",
        &SimConfig::default(),
        FULL,
    );
}

#[test]
fn rust_program() {
    if !qemu_perf() || !tools_available(&["rustc"]) {
        return;
    }
    let d = scratch();
    let exe = compile(
        d.path(),
        "rs",
        "rs.rs",
        r#"
use std::collections::BTreeMap;
#[inline(never)]
fn count(words: &[&str]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for w in words { *m.entry(w.to_string()).or_insert(0) += 1; }
    m
}
fn main() {
    let text = "a b c a b a d e f a";
    let words: Vec<&str> = text.split(' ').collect();
    let m = count(&words);
    println!("{:?}", m.get("a"));
}
"#,
        &["rustc", "-O", "-g"],
    )
    .unwrap();
    check(
        "rust",
        d.path(),
        &[&exe],
        "full",
        &SimConfig::default(),
        FULL,
    );
}

#[test]
fn go_program() {
    if !qemu_perf() || !tools_available(&["go"]) {
        return;
    }
    let d = scratch();
    write(
        d.path(),
        "main.go",
        r#"package main

import (
	"fmt"
	"sort"
	"strings"
)

func main() {
	words := strings.Fields("pear apple fig kiwi plum date lime")
	sort.Strings(words)
	fmt.Println(strings.Join(words, ","))
}
"#,
    );
    let status = std::process::Command::new("go")
        .args(["build", "-o", "gop", "main.go"])
        .current_dir(d.path())
        .env("GOCACHE", d.path().join("gocache"))
        .env("GO111MODULE", "off")
        .status()
        .expect("cannot run go");
    assert!(status.success(), "go build failed");
    // Asynchronous preemption signals land at run-dependent places (see languages.rs).
    std::env::set_var("GODEBUG", "asyncpreemptoff=1");
    check(
        "go",
        d.path(),
        &[&d.path().join("gop")],
        "full",
        &SimConfig::default(),
        FULL,
    );
}

#[test]
fn c_named_threads() {
    if !qemu_perf() || !tools_available(&["cc"]) {
        return;
    }
    let d = scratch();
    let exe = compile(
        d.path(),
        "named",
        "named.c",
        r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
__attribute__((noinline)) long leaf(long x) { return x * 3 + 1; }
__attribute__((noinline)) long rec(long n) { return n == 0 ? leaf(n) : rec(n - 1) + leaf(n); }
static void *body(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "worker-%ld", (long)arg);
    pthread_setname_np(pthread_self(), name);
    long s = 0;
    for (int i = 0; i < 20; i++) s += rec(8 + (long)arg);
    return (void *)s;
}
int main(void) {
    pthread_t t[3];
    for (long i = 0; i < 3; i++) pthread_create(&t[i], 0, body, (void *)i);
    long s = 0;
    for (int i = 0; i < 3; i++) { void *r; pthread_join(t[i], &r); s += (long)r; }
    printf("%ld\n", s);
    return 0;
}
"#,
        &["cc", "-O1", "-pthread"],
    )
    .unwrap();
    let s = check(
        "c threads",
        d.path(),
        &[&exe],
        "full",
        &SimConfig::default(),
        FULL,
    );
    // Each thread scored on its own track. ptsim gives every thread the process's COMM,
    // so `pthread_setname_np` names are not in the recording (not modelled).
    assert_eq!(threads(&s), 4, "main thread and three workers");
}

#[test]
fn sh_forks_and_execs() {
    if !qemu_perf() || !files_available(&["/bin/dash", "/bin/echo", "/usr/bin/tr"]) {
        return;
    }
    let d = scratch();
    let out = d.path().join("out.txt");
    let script = format!(
        "x=$(/bin/echo abc | /usr/bin/tr a b); echo \"$x\" > '{}'",
        out.display()
    );
    // The shell waits for its children and takes SIGCHLD wherever it lands (at a syscall
    // return, see SIGNAL_AT_SYSCALL_RETURN). Aligning perf's branches with the truth has
    // failed now and then here (1 run in ~4, before ptsim's truth modelled signals at a
    // syscall's return, issue 15), so a run is retried; a failure in 3 fresh recordings
    // is a real one.
    let argv = [Path::new("/bin/dash"), Path::new("-c"), Path::new(&script)];
    let mut attempt = 0;
    let s = loop {
        attempt += 1;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            check(
                "sh -c",
                d.path(),
                &argv,
                "full",
                &SimConfig::default(),
                SIGNAL_AT_SYSCALL_RETURN,
            )
        }));
        match r {
            Ok(s) => break s,
            Err(e) if attempt < 3 => {
                let why = e
                    .downcast_ref::<String>()
                    .map_or("(no message)", String::as_str);
                eprintln!("sh -c: attempt {attempt} failed, recording again: {why}");
            }
            Err(e) => std::panic::resume_unwind(e),
        }
    };
    assert_eq!(std::fs::read_to_string(&out).unwrap_or_default(), "bbc\n");
    // ptsim does not follow forks or execs: a forked child drops the plugin's buffers and
    // an exec'd program runs natively, outside QEMU. Only the shell itself is traced
    // (its fork, pipe and wait syscalls included); if that changes, this says so.
    assert_eq!(threads(&s), 1, "only the shell's own thread is traced");
}
