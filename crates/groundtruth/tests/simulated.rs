//! The whole pipeline on simulated Intel PT: real programs recorded by ptsim (full,
//! snapshot, with faults, snapshot with faults), decoded by ptscope through `perf script`
//! text and through the dlfilter, each writer scored against the true stacks.

use ptscope_groundtruth::sim::{variants, SimProgram, SimScore};
use ptsim::testing::{compile, scratch_dir, tools_available};

/// Recursion, calls through a pointer (qsort's comparator) and libc calls.
pub const CALL_TREE_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
__attribute__((noinline)) int leaf(int x) { return x * 2 + 1; }
__attribute__((noinline)) int fib(int n) { return n < 2 ? leaf(n) : fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) int cmp(const void *a, const void *b) {
    return *(const int *)a - *(const int *)b;
}
__attribute__((noinline)) int work(int n) {
    int *v = malloc(n * sizeof *v);
    for (int i = 0; i < n; i++) v[i] = (i * 7919) % n;
    qsort(v, n, sizeof *v, cmp);
    char buf[64];
    int s = 0;
    for (int i = 0; i < n; i += 8) { snprintf(buf, sizeof buf, "%d", v[i]); s += strlen(buf); }
    free(v);
    return s + fib(12);
}
int main(void) { int s = 0; for (int i = 0; i < 3; i++) s += work(200); printf("%d\n", s); return 0; }
"#;

/// Three threads each recursing, joined by main.
pub const THREADS_C: &str = r#"
#include <pthread.h>
#include <stdio.h>
__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }
__attribute__((noinline)) int rec(int n) { return n == 0 ? leaf(n) : rec(n - 1) + leaf(n); }
__attribute__((noinline)) void *body(void *arg) {
    long s = 0;
    for (int i = 0; i < 200; i++) s += rec(10 + (int)(long)arg);
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
"#;

/// Exceptions thrown through several frames and caught in an ancestor.
pub const EXCEPTIONS_CC: &str = r#"
#include <cstdio>
#include <stdexcept>
__attribute__((noinline)) int deep(int n) {
    if (n == 0) throw std::runtime_error("bottom");
    return deep(n - 1) + 1;
}
__attribute__((noinline)) int guarded(int n) {
    try { return deep(n); } catch (const std::exception &) { return -1; }
}
int main() { int s = 0; for (int i = 0; i < 20; i++) s += guarded(5 + i % 4); std::printf("%d\n", s); }
"#;

fn pct(x: f64) -> f64 {
    100.0 * x
}

fn report(s: &SimScore) {
    let (t, l, g) = (&s.text, &s.text.legacy, &s.text.segments);
    eprintln!(
        "{:<10} {:<16} events {:>7} errors {:>2} identical {:<5} legacy exact {:>6.2} suffix {:>6.2} root {:>6.2} phantoms {:>3} | segments exact {:>6.2} suffix {:>6.2} root {:>6.2} phantoms {:>3}",
        s.program,
        s.variant,
        t.events,
        t.errors,
        s.paths_identical(),
        pct(l.exact),
        pct(l.suffix_correct),
        pct(l.root_correct),
        l.phantom_frames,
        pct(g.exact),
        pct(g.suffix_correct),
        pct(g.root_correct),
        g.phantom_frames
    );
}

#[test]
fn whole_pipeline_matches_simulated_truth() {
    if !tools_available(&["qemu-x86_64", "perf", "cc", "c++"]) {
        return;
    }
    let dir = scratch_dir("groundtruth-sim").unwrap();
    let programs: [(&str, &str, &str, &[&str]); 3] = [
        ("calltree", "calltree.c", CALL_TREE_C, &["cc", "-O1", "-no-pie"]),
        ("threads", "threads.c", THREADS_C, &["cc", "-O1", "-pthread"]),
        ("exceptions", "exc.cc", EXCEPTIONS_CC, &["c++", "-O1"]),
    ];
    let mut failures = Vec::new();
    for (name, file, src, cc) in programs {
        let pdir = dir.join(name);
        std::fs::create_dir_all(&pdir).unwrap();
        let exe = compile(&pdir, name, file, src, cc).unwrap();
        let prog = SimProgram::record(name, &pdir, &[&exe]).unwrap();
        for (variant, cfg) in variants(8192, prog.main_steps) {
            let s = match prog.score(variant, &cfg) {
                Ok(s) => s,
                Err(e) => { failures.push(format!("{name} {variant}: {e:#}")); continue; }
            };
            report(&s);
            if std::env::var_os("SIM_DEBUG").is_some() {
                for p in s.text.segments.phantoms.iter().take(5) { eprintln!("  seg phantom {p:?}"); }
                for t in &s.text.truth {
                    eprintln!("  truth {:?} {}..{} pieces {} first {:?}", t.thread, t.start(), t.end(), t.timeline.len(), t.timeline.first());
                    if let Some(r) = s.text.recon.1.iter().find(|r| r.thread == t.thread) {
                        eprintln!("  recon first {:?}", r.timeline.first());
                        for m in ptscope_groundtruth::score::mismatches(t, r, 6) { eprintln!("  mismatch {}..{} truth {:?}\n      recon {:?}", m.start, m.end, m.truth, m.recon); }
                    }
                }
            }
            let (l, g) = (&s.text.legacy, &s.text.segments);
            let mut fail = |why: String| failures.push(format!("{name} {variant}: {why}"));
            // Both decode paths must hand the writers the same trace.
            if !s.paths_identical() || s.text.legacy != s.dlfilter.legacy {
                fail("text and dlfilter paths differ".into());
            }
            if s.text.events != s.dlfilter.events {
                fail(format!(
                    "{} events through text, {} through the dlfilter",
                    s.text.events, s.dlfilter.events
                ));
            }
            if s.text.events < 1000 || g.covered_ns == 0 {
                fail(format!("only {} events scored", s.text.events));
            }
            if variant.contains("faults") && s.text.errors != 4 {
                fail(format!("{} decode errors, expected 4", s.text.errors));
            }
            if g.exact < l.exact || g.root_correct < l.root_correct {
                fail(format!(
                    "segments below legacy: exact {:.4} < {:.4} or root {:.4} < {:.4}",
                    g.exact, l.exact, g.root_correct, l.root_correct
                ));
            }
            if g.phantom_frames != 0 {
                fail(format!("segments phantoms: {:?}", &g.phantoms[..g.phantoms.len().min(5)]));
            }
            if g.missing_threads != 0 {
                fail(format!("{} threads without a track", g.missing_threads));
            }
            if variant == "full" && g.exact < 0.995 {
                fail(format!("segments exact {:.4} < 0.995", g.exact));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
