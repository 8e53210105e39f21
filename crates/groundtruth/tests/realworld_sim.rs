//! Issue 11's real-world corpus on simulated Intel PT: programs nobody here wrote (Debian's
//! python3, gzip, grep, sort, sqlite3, git, dash) and programs built here in C, C++, Rust
//! and Go, each run once under `ptsim` (QEMU + a genuine PT `perf.data`), decoded by
//! ptscope through `perf script` text *and* through the dlfilter (then named as `ptscope
//! decode` names stripped code: per function), fed to both stack writers (legacy and
//! segments) and scored against the true stacks (`ptscope_groundtruth::sim`). Stripped
//! programs are also scored with 8 decode errors (issue 15).
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

/// With decode errors: the issue's goal (time inside the gaps is not scored), never below
/// legacy.
const WITH_GAPS: Floor = Floor {
    exact: 0.95,
    suffix: 0.95,
    root: 0.95,
    below_legacy: None,
};

/// With decode errors, on a program whose fault placements were swept (issue 25's goal for
/// them: 99.9 % exact outside the gaps). Suffix counts the time inside the gaps too.
const WITH_GAPS_SWEPT: Floor = Floor {
    exact: 0.999,
    suffix: 0.995,
    root: 0.999,
    below_legacy: None,
};

/// dash: its SIGCHLD handler, delivered as `wait4` returns, runs on top of `wait4` (the
/// truth since issue 15). Segments measured 94.9-95.4 % exact when it replaced `wait4` by
/// the handler; since it pushes a handler wherever tracing restarts elsewhere than after
/// the stop (issue 15), 100.00 % (legacy 93.5 %).
const SIGNAL_AT_SYSCALL_RETURN: Floor = FULL;

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

/// What the builtin decoder's nanosecond frames may cost it against a floor or against
/// perf's paths: a branch it times by interpolation can fall in the neighbouring
/// nanosecond, and it is scored at true times where perf's paths are scored on perf's
/// clock (at most 0.05 % of the time).
const NS_FRAMES: f64 = 5e-4;

fn report(s: &SimScore) {
    let (t, l, g) = (&s.text, &s.text.legacy, &s.text.segments);
    eprintln!(
        "REALWORLD | {} | {} | {} | {} threads | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | outside gaps {:.2} | {:.2} | exact or marked {:.2} ({:.2} outside gaps), {} markers |",
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
        g.phantom_frames,
        pct(l.exact_outside_gaps),
        pct(g.exact_outside_gaps),
        pct(g.exact_or_marked),
        pct(g.exact_or_marked_outside_gaps),
        g.marker_frames,
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
    let prog = SimProgram::record(name, dir, argv)
        .unwrap_or_else(|e| panic!("{name}: recording failed: {e:#}"));
    check_variant(&prog, variant, cfg, floor)
}

/// `overflow=4,corrupt=4` (each overflow loses 200 branches), spread over the main thread:
/// 8 decode errors, each a gap after which the writers must line the stacks up again.
fn eight_faults() -> SimConfig {
    SimConfig {
        faults: ptsim::FaultSpec::parse("overflow=4,corrupt=4").expect("valid faults"),
        ..SimConfig::default()
    }
}

/// Decode errors `cfg` injects (each overflow and each corrupt packet is one).
fn injected_errors(cfg: &SimConfig) -> usize {
    match &cfg.main_faults {
        Some(f) => f.overflows.len() + f.corruptions.len(),
        None => cfg.faults.overflows + cfg.faults.corruptions,
    }
}

/// Scores `variant` of a recorded program through both decoders and both writers and
/// checks the result against `floor`.
fn check_variant(prog: &SimProgram, variant: &str, cfg: &SimConfig, floor: Floor) -> SimScore {
    check_variant_kept(prog, variant, cfg, floor, false)
}

/// [`check_variant`], keeping the text path's truth and stacks ([`SimScore::detail`])
/// if `keep`.
fn check_variant_kept(
    prog: &SimProgram,
    variant: &str,
    cfg: &SimConfig,
    floor: Floor,
    keep: bool,
) -> SimScore {
    let name = prog.name.as_str();
    let t0 = std::time::Instant::now();
    // REALWORLD_DEBUG=N: the first N mismatching intervals of segments per thread (the
    // text path's truth and stacks, which only `score_detailed` keeps).
    let debug: Option<usize> = std::env::var("REALWORLD_DEBUG")
        .ok()
        .and_then(|v| v.parse().ok());
    let s = if keep || debug.is_some() {
        prog.score_detailed(variant, cfg)
    } else {
        prog.score(variant, cfg)
    }
    .unwrap_or_else(|e| panic!("{name} {variant}: decoding or scoring failed: {e:#}"));
    report(&s);
    let b = &s.builtin;
    eprintln!(
        "BUILTIN | {} | {} | {} | {} | same events {} | segments exact {:.3} vs dlfilter {:.3} | suffix {:.3} vs {:.3} | root {:.3} vs {:.3} | legacy exact {:.3} vs {:.3} | phantoms {} vs {} |",
        s.program,
        s.variant,
        b.events,
        b.errors,
        s.builtin_same_events,
        pct(b.segments.exact),
        pct(s.dlfilter.segments.exact),
        pct(b.segments.suffix_correct),
        pct(s.dlfilter.segments.suffix_correct),
        pct(b.segments.root_correct),
        pct(s.dlfilter.segments.root_correct),
        pct(b.legacy.exact),
        pct(s.dlfilter.legacy.exact),
        b.segments.phantom_frames,
        s.dlfilter.segments.phantom_frames,
    );
    if std::env::var_os("BUILTIN_DEBUG").is_some() {
        for p in b.segments.phantoms.iter().take(12) {
            eprintln!("  builtin phantom {p:?}");
        }
    }
    eprintln!("  {name} {variant}: {:.1} s", t0.elapsed().as_secs_f64());
    if let Some(n) = debug {
        for p in s.text.segments.phantoms.iter().take(n) {
            eprintln!("  segments phantom {p:?}");
        }
        let snapshot = cfg.snapshot_size.is_some();
        let d = s.detail.as_ref().expect("score_detailed keeps the detail");
        for t in &d.truth {
            eprintln!("  {:?} gaps {:?}", t.thread, t.gaps);
            if let Some(r) = d.recon.1.iter().find(|r| r.thread == t.thread) {
                let all =
                    ptscope_groundtruth::score::mismatches_interned(t, r, &d.names, usize::MAX);
                let all_too = std::env::var_os("REALWORLD_DEBUG_ALL").is_some();
                for m in all
                    .into_iter()
                    .filter(|m| all_too || !(snapshot && m.suffix))
                    .take(n)
                {
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
    if s.text.errors != injected_errors(cfg) {
        failures.push(format!(
            "{} decode errors, {} injected",
            s.text.errors,
            injected_errors(cfg)
        ));
    }
    if g.missing_threads != 0 {
        failures.push(format!("{} threads without a track", g.missing_threads));
    }
    // The segments writer's marker frame stands where the trace cannot decide which
    // frames survived a decode error: it counts as right where it stands for true frames
    // (issue 25), so the floors are on "exact or marked".
    if floor.below_legacy.is_none()
        && (g.exact_or_marked < l.exact || g.root_correct < l.root_correct)
    {
        failures.push(format!(
            "segments below legacy: exact or marked {:.4} < {:.4} or root {:.4} < {:.4}",
            g.exact_or_marked, l.exact, g.root_correct, l.root_correct
        ));
    }
    let exact = if injected_errors(cfg) > 0 {
        g.exact_or_marked_outside_gaps
    } else {
        g.exact_or_marked
    };
    if exact < floor.exact || g.suffix_correct < floor.suffix || g.root_correct < floor.root {
        failures.push(format!(
            "segments exact or marked {exact:.4} / suffix {:.4} / root {:.4} below the floor {floor:?}",
            g.suffix_correct, g.root_correct
        ));
    }
    // ptscope's own decoder: perf's events (times aside), at least the floor on the
    // truth at true times, frames it invents no longer than a nanosecond (a branch
    // timed by interpolation can fall in the neighbouring nanosecond).
    let b = &s.builtin;
    if !s.builtin_same_events {
        failures.push("the builtin decoder's events differ from perf's (dlfilter path)".into());
    }
    if b.errors != injected_errors(cfg) {
        failures.push(format!(
            "builtin: {} decode errors, {} injected",
            b.errors,
            injected_errors(cfg)
        ));
    }
    let b_exact = if injected_errors(cfg) > 0 {
        b.segments.exact_or_marked_outside_gaps
    } else {
        b.segments.exact_or_marked
    };
    if b_exact < floor.exact - NS_FRAMES
        || b.segments.suffix_correct < floor.suffix - NS_FRAMES
        || b.segments.root_correct < floor.root - NS_FRAMES
    {
        failures.push(format!(
            "builtin segments exact or marked {b_exact:.4} / suffix {:.4} / root {:.4} below the floor {floor:?}",
            b.segments.suffix_correct, b.segments.root_correct
        ));
    }
    // A PLT stub is `NAME@plt` to the builtin decoder; perf 6.1 (and so the truth) names
    // one after the sizeless symbol it stretches over `.plt` (`_init`) wherever that
    // symbol lies above the stub in its symbol tree (seen: the first stub of an
    // executable with a `.symtab`, `printf@plt`, `sigaction@plt`). Its events are perf's
    // (`builtin_same_events` keys PLT code by address), so such a frame is renamed, not
    // invented; its time still counts against the floors.
    let long: Vec<_> = b
        .segments
        .phantoms
        .iter()
        .filter(|p| {
            p.end - p.start > 1
                && !(p.inferred && p.name.starts_with("[unknown @ "))
                && !p.name.ends_with("@plt")
        })
        .collect();
    if !long.is_empty() {
        failures.push(format!(
            "{} builtin phantom frames longer than 1 ns, e.g. {:?}",
            long.len(),
            &long[..long.len().min(3)]
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

/// [`check_variant`] for every variant of `floors`, all scored before any failure is
/// reported (so a run shows every figure).
fn check_variants(prog: &SimProgram, floors: &[(&str, SimConfig, Floor)]) -> Vec<SimScore> {
    check_variants_kept(prog, floors, false)
}

/// [`check_variants`], keeping each variant's text-path truth and stacks if `keep`.
fn check_variants_kept(
    prog: &SimProgram,
    floors: &[(&str, SimConfig, Floor)],
    keep: bool,
) -> Vec<SimScore> {
    let mut scores = Vec::new();
    let mut failures = Vec::new();
    for (variant, cfg, floor) in floors {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            check_variant_kept(prog, variant, cfg, *floor, keep)
        }));
        match r {
            Ok(s) => scores.push(s),
            Err(e) => failures.push(
                e.downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| format!("{variant}: (no message)")),
            ),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    scores
}

/// Threads the truth scored (one per traced thread).
fn threads(s: &SimScore) -> usize {
    s.text.threads
}

/// A scratch directory, removed at the end unless `REALWORLD_KEEP` is set (to look at the
/// recordings: each variant's `perf.data` is in a subdirectory named after it).
fn scratch() -> tempfile::TempDir {
    let keep = std::env::var_os("REALWORLD_KEEP").is_some();
    let d = tempfile::Builder::new()
        .prefix("ptscope-realworld-")
        .disable_cleanup(keep)
        .tempdir()
        .expect("cannot create a temporary directory");
    if keep {
        eprintln!("REALWORLD_KEEP: recordings kept in {}", d.path().display());
    }
    d
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
#[ignore = "slow for CI (the full variant alone took 310 s to 1573 s in the debug build at loads of 1 to 27; CI is at 1434 s of its 1800). Its phantom PyObject_CheckBuffer frame is fixed (864906d, test intel-pt/tests/timing.rs); its run with ~40 builtin decode errors was ptsim compressing returns from deeper than 64 calls, which no processor does and the builtin decoder (64 entries, as libipt) cannot follow (1 python3 recording in 20; ptsim keeps 64 since session 6, test ptsim returns_deeper_than_64_calls_are_not_compressed; 20 recordings since, 0 errors). One run after that fix (session 6, load ~9): full variant 0 builtin errors, perf's events, 99.998 % exact; snapshot perf's events, 99.964 % suffix; builtin phantom frames 201 and 59 (dlfilter 0), their length check's verdict unseen: a 2400 s timeout cut the run in snapshot+faults. Session 7, release build (`cargo test --release -p ptscope-groundtruth --test realworld_sim -- --ignored python3_script`, 76-87 s at load ~11, twice): passes, all three variants; builtin perf's events, 0 and 8 errors as injected; its phantom frames (224-226, 69-70, 68) are all 1 ns PLT stubs (`@plt`, `memset@plt`) that interpolated times put a nanosecond off; on the true clock it scores 99.998 % exact (full) where the dlfilter path scores 97.13-97.15 % with 40 234-40 710 phantom frames, and 934-951 in the snapshots (BUILTIN_DEBUG=1; the dlfilter's 100.00 % is against the truth moved to perf's clock)"]
fn python3_script() {
    if !qemu_perf() || !files_available(&["/usr/bin/python3"]) {
        return;
    }
    let d = scratch();
    let script = write(
        d.path(),
        "rec.py",
        // Recursion through C (`sum`, `map`, the call protocol): each Python level is a
        // few C frames of the interpreter, a repeating pattern on the C stack. Leaving
        // with `os._exit` skips the interpreter's shutdown, so the snapshot holds the
        // recursion.
        "import os\n\ndef f(n):\n    return 1 if n == 0 else sum(map(f, (n - 1, n // 2)))\n\nprint(f(14))\nos._exit(0)\n",
    );
    // Interpreter startup alone is ~1.8 M branches: the whole run is scored (startup
    // included: what the scorer could not hold before interning, 24 GB at 8.4 M events),
    // and the last 64 KiB (~40 k branches), which hold the end of the recursion.
    let prog = SimProgram::record(
        "python3",
        d.path(),
        &[
            Path::new("/usr/bin/python3"),
            Path::new("-I"),
            Path::new("-S"),
            &script,
        ],
    )
    .unwrap_or_else(|e| panic!("python3: recording failed: {e:#}"));
    // A snapshot's root (`_start`, never returning) is before the buffer: exact and root
    // are 0 by construction, the suffix is what is measured.
    let snap = Floor {
        exact: 0.0,
        suffix: 0.999,
        root: 0.0,
        below_legacy: None,
    };
    // The whole run (1.64 M events): segments 100.00 % exact, suffix and root, legacy
    // 97.6 %. python3.11's `.cold` code has no symbol, so the naming step names it after
    // its FDE (`python3.11+0x4517d5`); during a nested import,
    // `PyImport_ImportModuleLevelObject` jumps into its cold code while an outer import's
    // frame is still in it. Segments took that for an unwind (0.00 % exact, 26.6 % suffix:
    // six wrong outer frames learnt for the rest of the run) until only code made for
    // non-local exits (`longjmp`, the unwinders) counted as unwinding.
    let full = FULL;
    let scores = check_variants(
        &prog,
        &[
            ("full", SimConfig::default(), full),
            ("snapshot", snapshot(SNAPSHOT), snap),
            (
                "snapshot+faults",
                snapshot_with_faults(SNAPSHOT, prog.main_steps),
                Floor {
                    suffix: 0.95,
                    ..snap
                },
            ),
        ],
    );
    assert!(
        scores[0].text.events > 1_000_000,
        "the full python3 run has only {} events",
        scores[0].text.events
    );
}

/// The python3 snapshot's size.
const SNAPSHOT: usize = 64 << 10;

/// A snapshot's root (`_start`, never returning) is before the buffer: exact and root are
/// 0 by construction; every stack must be a true suffix.
const SNAPSHOT_SUFFIX: Floor = Floor {
    exact: 0.0,
    suffix: 0.999,
    root: 0.0,
    below_legacy: None,
};

/// A snapshot of the last `bytes` with 8 decode errors (4 overflows losing 50 branches,
/// 4 corrupt packets) spread over the part the buffer keeps (about a step per byte at
/// ~1.6 bytes per reported branch: the last `bytes / 2` steps are safely inside).
fn snapshot_with_faults(bytes: usize, main_steps: usize) -> SimConfig {
    let kept = (bytes / 2).min(main_steps);
    let at = |k: usize| main_steps - kept + kept * k / 9;
    SimConfig {
        main_faults: Some(ptsim::pt::Faults {
            overflows: [1, 3, 5, 7].iter().map(|&k| (at(k), 50)).collect(),
            corruptions: [2, 4, 6, 8].iter().map(|&k| at(k)).collect(),
        }),
        ..snapshot(bytes)
    }
}

#[test]
fn gzip_text() {
    if !qemu_perf() || !files_available(&["/usr/bin/gzip"]) {
        return;
    }
    let d = scratch();
    // 100 KiB: ~1.9 M events (the scorer holds a few handles per stack change).
    let input = write(d.path(), "in.txt", &text(100 << 10));
    let prog = SimProgram::record(
        "gzip",
        d.path(),
        &[Path::new("/usr/bin/gzip"), Path::new("-k"), &input],
    )
    .unwrap_or_else(|e| panic!("gzip: recording failed: {e:#}"));
    check_variant(&prog, "full", &SimConfig::default(), FULL);
    check_variant(&prog, "faults", &eight_faults(), WITH_GAPS);
    // Compressing is conditional branches (TNT bits, no events): 64 KiB holds ~500.
    check_variant(&prog, "snapshot", &snapshot(1 << 20), SNAPSHOT_SUFFIX);
}

/// A decode error over ld.so's jump into a stripped program (issue 25, the sqlite3 fault
/// placement that scored 67 %): after the gap the stack is known from
/// `__libc_start_main` up, and the writer infers the program's entry below it. perf
/// names that entry `gzip+0x…` (it has no symbol), a name the trace shows only in the
/// jump the gap lost: the inferred frame must get it from the program's ELF header, or
/// the whole run after the gap stands on a root the truth never had (`_start`).
#[test]
fn a_gap_over_the_jump_into_a_stripped_program_keeps_its_entry() {
    if !qemu_perf() || !files_available(&["/usr/bin/gzip"]) {
        return;
    }
    let d = scratch();
    let input = write(d.path(), "in.txt", &text(8 << 10));
    let prog = SimProgram::record(
        "gzip",
        d.path(),
        &[Path::new("/usr/bin/gzip"), Path::new("-k"), &input],
    )
    .unwrap_or_else(|e| panic!("gzip: recording failed: {e:#}"));
    let at = prog.program_entry_step;
    assert!(at > 8, "gzip: no jump into the program found");
    // From inside ld.so's `_dl_init` (8 steps before the jump) into `__libc_start_main`.
    let cfg = SimConfig {
        main_faults: Some(ptsim::pt::Faults {
            overflows: vec![(at - 8, 40)],
            corruptions: Vec::new(),
        }),
        ..SimConfig::default()
    };
    check_variant(&prog, "gap over the entry", &cfg, FULL);
}

/// gzip, one overflow from inside `__libc_start_main` (before it calls
/// `__libc_start_call_main`) into `main`: after it the trace shows `main` with no caller,
/// and `main` never returns (gzip leaves by `exit`), so nothing in the trace names the
/// function between `main` and `__libc_start_main`. The program's code does (`_start`
/// passes `main` to `__libc_start_main`), and glibc's symbols name the caller
/// (`__libc_start_call_main`): without them `main` stood on whatever was open when the
/// gap began (`__libc_start_main`, or ld.so's lazy binder under it) for the whole run.
#[test]
fn a_gap_from_libc_start_main_into_main_keeps_mains_caller() {
    if !qemu_perf() || !files_available(&["/usr/bin/gzip"]) {
        return;
    }
    let d = scratch();
    let input = write(d.path(), "in.txt", &text(8 << 10));
    let prog = SimProgram::record(
        "gzip",
        d.path(),
        &[Path::new("/usr/bin/gzip"), Path::new("-k"), &input],
    )
    .unwrap_or_else(|e| panic!("gzip: recording failed: {e:#}"));
    let at = prog.main_call_step;
    assert!(at > 40, "gzip: no call of main found");
    // From 40 steps before `main`'s call (in `__libc_start_main`, before it calls
    // `__libc_start_call_main`) to 60 steps into `main`.
    let cfg = SimConfig {
        main_faults: Some(ptsim::pt::Faults {
            overflows: vec![(at - 40, 100)],
            corruptions: Vec::new(),
        }),
        ..SimConfig::default()
    };
    check_variant(&prog, "gap into main", &cfg, FULL);
}

#[test]
fn grep_text() {
    if !qemu_perf() || !files_available(&["/usr/bin/grep"]) {
        return;
    }
    let d = scratch();
    let input = write(d.path(), "in.txt", &text(16 << 10));
    let prog = SimProgram::record(
        "grep",
        d.path(),
        &[
            Path::new("/usr/bin/grep"),
            Path::new("-c"),
            Path::new("-E"),
            Path::new("(st|fr)a[a-z]+ (leaf|gap)"),
            &input,
        ],
    )
    .unwrap_or_else(|e| panic!("grep: recording failed: {e:#}"));
    check_variant(&prog, "full", &SimConfig::default(), FULL);
    check_variant(&prog, "faults", &eight_faults(), WITH_GAPS);
    check_variant(&prog, "snapshot", &snapshot(SNAPSHOT), SNAPSHOT_SUFFIX);
}

#[test]
fn sort_text() {
    if !qemu_perf() || !files_available(&["/usr/bin/sort"]) {
        return;
    }
    let d = scratch();
    let input = write(d.path(), "in.txt", &text(8 << 10));
    let out = d.path().join("sorted.txt");
    let prog = SimProgram::record(
        "sort",
        d.path(),
        &[Path::new("/usr/bin/sort"), Path::new("-o"), &out, &input],
    )
    .unwrap_or_else(|e| panic!("sort: recording failed: {e:#}"));
    check_variant(&prog, "full", &SimConfig::default(), FULL);
    check_variant(&prog, "faults", &eight_faults(), WITH_GAPS);
    check_variant(&prog, "snapshot", &snapshot(SNAPSHOT), SNAPSHOT_SUFFIX);
}

#[test]
fn bc_recursive_function() {
    if !qemu_perf() || !files_available(&["/usr/bin/bc"]) {
        return;
    }
    let d = scratch();
    // GNU bc runs its functions on a stack of its own (no C recursion for `f`), but its
    // parser and printer recurse; stripped like sort.
    let script = write(
        d.path(),
        "fib.bc",
        "define f(n){if(n<2)return n;return f(n-1)+f(n-2)}\nf(12)\nquit\n",
    );
    let prog = SimProgram::record(
        "bc",
        d.path(),
        &[Path::new("/usr/bin/bc"), Path::new("-q"), &script],
    )
    .unwrap_or_else(|e| panic!("bc: recording failed: {e:#}"));
    check_variant(&prog, "full", &SimConfig::default(), FULL);
    check_variant(&prog, "faults", &eight_faults(), WITH_GAPS);
    check_variant(&prog, "snapshot", &snapshot(SNAPSHOT), SNAPSHOT_SUFFIX);
}

/// sqlite3 under simulated PT, decoded whole and as a snapshot.
#[test]
fn sqlite3_queries() {
    let Some((_d, prog)) = sqlite3_recording() else {
        return;
    };
    check_variant(&prog, "full", &SimConfig::default(), FULL);
    check_variant(&prog, "snapshot", &snapshot(SNAPSHOT), SNAPSHOT_SUFFIX);
}

/// sqlite3 under simulated PT with eight decode errors (four overflows, four corrupt
/// packets). Where they fall depends on the environment's size (the loader's steps);
/// swept over 75 placements of the eight (FIDELITY.md, issue 25), every one at 99.93 %
/// or more exact outside the gaps, root 100 %: the floor is the issue's 99.9 %.
#[test]
fn sqlite3_queries_with_faults() {
    let Some((_d, prog)) = sqlite3_recording() else {
        return;
    };
    check_variant(&prog, "faults", &eight_faults(), WITH_GAPS_SWEPT);
}

/// sqlite3 creating, filling and querying a table, recorded under ptsim (`None` when
/// qemu, perf or sqlite3 is missing); the directory holds the database.
fn sqlite3_recording() -> Option<(tempfile::TempDir, SimProgram)> {
    if !qemu_perf() || !files_available(&["/usr/bin/sqlite3"]) {
        return None;
    }
    let d = scratch();
    let db = d.path().join("t.db");
    let prog = SimProgram::record(
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
    )
    .unwrap_or_else(|e| panic!("sqlite3: recording failed: {e:#}"));
    Some((d, prog))
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

/// OCaml exceptions raised through several frames, re-raised, and raised inside
/// handlers (`ocamlopt` without magic-trace's `.note.ocaml_eh`): perf's paths unwind by
/// magic-trace's heuristics; ptscope's own decoder finds the trap instructions
/// (pushtrap, poptrap, the handlers) in the code and keeps the trap stack exactly.
#[test]
fn ocaml_exceptions() {
    if !qemu_perf() || !tools_available(&["ocamlopt"]) {
        return;
    }
    let d = scratch();
    let exe = compile(
        d.path(),
        "exn",
        "exn.ml",
        r#"
exception Odd of int
exception Wrapped of string

let[@inline never] leaf i = if i mod 3 = 1 then raise (Odd i) else i * 2
let[@inline never] middle i = leaf i + 1
let[@inline never] outer i = middle i + middle (i + 1)

(* a re-raise from a handler, and a new exception raised inside one *)
let[@inline never] rethrow i =
  try outer i with
  | Odd n when n mod 2 = 0 -> raise (Wrapped (string_of_int n))
  | Odd _ as e -> raise e

let[@inline never] nested i =
  try
    try rethrow i with
    | Wrapped s -> (try int_of_string s + leaf (i + 1) with Odd k -> -k)
  with Odd n -> n

let () =
  let total = ref 0 in
  for i = 0 to 300 do
    total := !total + nested i
  done;
  Printf.printf "%d\n" !total
"#,
        &["ocamlopt", "-g"],
    )
    .unwrap();
    // The heuristics are what perf's paths have: their floor is what they reach.
    let heuristic = Floor {
        exact: 0.5,
        suffix: 0.5,
        root: 0.99,
        below_legacy: Some("OCaml exceptions without trap addresses: both writers guess"),
    };
    let s = check(
        "ocaml exceptions",
        d.path(),
        &[&exe],
        "full",
        &SimConfig::default(),
        heuristic,
    );
    let b = &s.builtin.segments;
    eprintln!(
        "OCAML | segments exact: builtin (trap instructions) {:.3} % vs dlfilter (heuristics) {:.3} % | legacy {:.3} % vs {:.3} %",
        pct(b.exact),
        pct(s.dlfilter.segments.exact),
        pct(s.builtin.legacy.exact),
        pct(s.dlfilter.legacy.exact)
    );
    // Both near 100 %: the builtin path may trail by its nanosecond frames, which vary
    // with the recording (seen once in three runs, session 11: 0.005 % below).
    assert!(
        b.exact >= 0.999 && b.exact >= s.dlfilter.segments.exact - NS_FRAMES,
        "builtin segments exact {:.4} (dlfilter {:.4})",
        b.exact,
        s.dlfilter.segments.exact
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

/// Go's 4 threads, whose scheduling differs per run: under contention the scheduler
/// resumes goroutines on other threads than the ones they parked on, which dropped a
/// thread's whole stack while they ran until Go's thread roots were recognised under
/// their ABI0 names (`runtime.clone.abi0`, `runtime.rt0_go.abi0`; 6 of 60 runs at 89-99.7 %
/// exact before, 12 at once on the 2 cores; held deterministically by `segments_behaviour::
/// a_goroutine_resumed_on_another_thread_runs_on_the_threads_scheduler`).
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

/// Signals on a program's main thread while four threads compute: ten `raise(SIGUSR1)`
/// (`tgkill`: each handler runs as the syscall returns), a signal raised inside a handler,
/// one raised while blocked (delivered as the handler's `rt_sigreturn` returns),
/// `longjmp` out of a recursion and `siglongjmp` out of a handler.
const SIGNALS_C: &str = r#"
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
static volatile int hits, nested, sink;
static jmp_buf out_of_recursion;
static sigjmp_buf out_of_handler;
__attribute__((noinline)) long spin(long n) { long s = 0; for (long i = 0; i < n; i++) s += i % 5; return s; }
__attribute__((noinline)) void note(void) { sink++; }
static void on_usr2(int sig) { (void)sig; nested++; note(); }
static void on_usr1(int sig) {
    (void)sig;
    hits++;
    note();
    if (hits == 4) raise(SIGUSR2);
    if (hits == 6) raise(SIGUSR1);
    if (hits == 13) siglongjmp(out_of_handler, 1);
}
__attribute__((noinline)) int descend(int n) {
    if (n == 0) longjmp(out_of_recursion, 1);
    int r = descend(n - 1);
    sink = r;
    return r + 1;
}
static void *worker(void *arg) { return (void *)spin((long)arg); }
static void (*volatile indirect)(void) = note;
int main(void) {
    /* Indirect calls (a packet each) put ld.so's start-up outside a small snapshot. */
    for (int i = 0; i < 3000; i++) indirect();
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)(2000 + 150 * i));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, 0);
    sa.sa_handler = on_usr2;
    sigaction(SIGUSR2, &sa, 0);
    for (int i = 0; i < 10; i++) { raise(SIGUSR1); note(); }
    if (!setjmp(out_of_recursion)) descend(16);
    if (!sigsetjmp(out_of_handler, 1)) for (;;) raise(SIGUSR1);
    long total = 0;
    for (int i = 0; i < 4; i++) { void *r; pthread_join(t[i], &r); total += (long)r; }
    printf("%d %d %ld\n", hits, nested, total);
    return 0;
}
"#;

/// C++ exceptions thrown through frames that own a `std::string` (each a cleanup landing
/// pad ending in `_Unwind_Resume`), in a recursion and caught two levels above the thrower.
const STRING_FRAMES_CC: &str = r#"
#include <cstdio>
#include <stdexcept>
#include <string>
__attribute__((noinline)) void validate(const std::string &s, int i) {
    if (i % 3 == 0) throw std::runtime_error("rejected " + s);
}
__attribute__((noinline)) int parse(int i) {
    std::string field(40, char('a' + i % 26));
    validate(field, i);
    return (int)field.size();
}
__attribute__((noinline)) int nest(int depth, int i) {
    std::string frame(32, char('0' + depth));
    if (depth == 0) return parse(i);
    return nest(depth - 1, i) + (int)frame.size();
}
__attribute__((noinline)) int layer(int i) {
    std::string tag = "layer " + std::to_string(i) + std::string(24, '.');
    return parse(i) + (int)tag.size();
}
__attribute__((noinline)) int attempt(int i) {
    try {
        return i % 2 ? nest(2, i) : layer(i);
    } catch (const std::exception &e) {
        return -(int)std::string(e.what()).size();
    }
}
int main() {
    long s = 0;
    for (int i = 0; i < 12; i++) s += attempt(i);
    std::printf("%ld\n", s);
}
"#;

/// 8 decode errors (4 overflows of 50 branches, 4 corrupt packets), half over the main
/// thread's start-up (before its entry into `main`) and half over the program's own work
/// (from that entry on), each half spread over its part as `FaultSpec::place` spreads
/// faults over a thread. Shares of each part, not of all steps: the loader's start-up
/// grows with the environment's size, and at shares of all steps the errors in the
/// program's work landed on different code in every environment. Swept (one recording,
/// `overflow=4,corrupt=4,overflow-len=50` moved together, debug build), some of those
/// placements leave `cpp_recursive_cleanups` below its floor: one overflow at `main`'s
/// entry (87.4 % exact outside gaps), over the lazy binding of `__cxa_throw` (97.7 %) or
/// inside an `_Unwind_Resume` chain through the recursion (98.8 %); with 18 extra
/// environment variables the old placement scored 91.2 %.
///
/// # Panics
/// If the main thread never entered `main`.
fn faults_in_both_parts(prog: &SimProgram) -> SimConfig {
    let (entry, end) = (prog.main_entry_step, prog.main_steps);
    assert!(
        entry > 0 && entry < end,
        "{}: no entry into main",
        prog.name
    );
    let mut faults = ptsim::pt::Faults::default();
    for (from, to) in [(0, entry), (entry, end)] {
        let len = to - from;
        for k in 1..=2 {
            faults.overflows.push((from + len * k / 3, 50));
            faults.corruptions.push(from + len * k / 3 + len / 12);
        }
    }
    SimConfig {
        main_faults: Some(faults),
        ..SimConfig::default()
    }
}

/// What a program with signals or C++ unwinding must reach, per variant: exact on a full
/// recording, exact outside the gaps with decode errors (spread over the whole run, and
/// over the program's own work after `main`'s entry), and in a snapshot of the last `snapshot_bytes` (whose root is
/// before the buffer) every stack a true suffix for `suffix` of the time.
fn unwinding_floors(
    prog: &SimProgram,
    snapshot_bytes: usize,
    suffix: f64,
) -> [(&'static str, SimConfig, Floor); 4] {
    let with_errors = Floor {
        exact: 0.95,
        suffix: 0.0,
        root: 0.0,
        below_legacy: None,
    };
    [
        ("full", SimConfig::default(), FULL),
        ("faults", faults_in_both_parts(prog), with_errors),
        ("late faults", prog.late_faults(), with_errors),
        (
            "snapshot",
            snapshot(snapshot_bytes),
            Floor {
                exact: 0.0,
                suffix,
                root: 0.0,
                below_legacy: None,
            },
        ),
    ]
}

#[test]
fn c_signals_longjmp_threads() {
    if !qemu_perf() || !tools_available(&["cc"]) {
        return;
    }
    let d = scratch();
    let exe = compile(
        d.path(),
        "sigs",
        "sigs.c",
        SIGNALS_C,
        &["cc", "-O1", "-pthread", "-fno-optimize-sibling-calls"],
    )
    .unwrap();
    let prog = SimProgram::record("c signals", d.path(), &[&exe])
        .unwrap_or_else(|e| panic!("recording failed: {e:#}"));
    let floors = unwinding_floors(&prog, 8 << 10, 1.0);
    for s in check_variants_kept(&prog, &floors, true) {
        assert_eq!(threads(&s), 5, "main thread and four workers");
        // Every variant holds the signal handlers (a snapshot's too).
        let d = s.detail.as_ref().expect("kept");
        let handled = d.names.find_frame("on_usr1").is_some_and(|f| {
            d.truth
                .iter()
                .any(|t| t.timeline.iter().any(|p| d.names.contains(p.2, f)))
        });
        assert!(handled, "{}: no signal handler in the trace", s.variant);
    }
}

/// Timer signals delivered asynchronously: SIGALRM from a 200 µs interval timer interrupts
/// a call-free `while (!alarms)` loop (a run of conditional branches) and then a loop
/// calling a function, so handlers start at asynchronous stops (FUP + TIP.PGD) both in
/// `main` and in its callee.
const ASYNC_SIGNALS_C: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

static volatile sig_atomic_t alarms;
static volatile long sink;

__attribute__((noinline)) void note_alarm(int sig) { sink += sig; }

static void on_alarm(int sig) {
    note_alarm(sig);
    alarms++;
}

__attribute__((noinline)) long step(long i) { return sink + i * 3; }
__attribute__((noinline)) void tick(void) { sink++; }
static void (*volatile indirect)(void) = tick;

int main(void) {
    /* Indirect calls (a packet each) keep ld.so's start-up out of the 8 KiB snapshot
       however few loop iterations a loaded machine runs between alarms. */
    for (int i = 0; i < 3000; i++) indirect();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval it = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &it, 0);
    while (alarms < 4) {
    }
    long s = 0;
    /* An indirect call each time round: ptsim places a PSB only after an IP packet, and a
       loop of direct calls and compressed returns (TNT bits alone) would leave an 8 KiB
       snapshot with no place to start decoding until the last alarm. */
    while (alarms < 8) {
        s += step(s & 7);
        indirect();
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, 0);
    printf("%d %ld\n", (int)alarms, s);
    return 0;
}
"#;

#[test]
fn c_async_timer_signals() {
    if !qemu_perf() || !tools_available(&["cc"]) {
        return;
    }
    let d = scratch();
    let exe = compile(
        d.path(),
        "alarms",
        "alarms.c",
        ASYNC_SIGNALS_C,
        &["cc", "-O1", "-fno-optimize-sibling-calls"],
    )
    .unwrap();
    let prog = SimProgram::record("c async signals", d.path(), &[&exe])
        .unwrap_or_else(|e| panic!("recording failed: {e:#}"));
    let floors = unwinding_floors(&prog, 8 << 10, 1.0);
    for s in check_variants_kept(&prog, &floors, true) {
        // How many alarms land where depends on the host's speed: require the handler.
        let d = s.detail.as_ref().expect("kept");
        let handler = d.names.find_frame("on_alarm");
        let handled = handler.is_some_and(|f| {
            d.truth
                .iter()
                .any(|t| t.timeline.iter().any(|p| d.names.contains(p.2, f)))
        });
        assert!(handled, "{}: no signal handler in the trace", s.variant);
    }
    // The program exits after 8 deliveries; nearly all interrupt the busy loops (a few may
    // land as a syscall returns, not asynchronously).
    let kernel_cycles = SimConfig::default().kernel_cycles;
    let asyncs = ptsim::truth::derive(&prog.log, kernel_cycles)
        .1
        .async_transfers;
    assert!(asyncs >= 4, "{asyncs} asynchronous stops, 8 alarms awaited");
}

#[test]
fn cpp_exceptions_through_string_frames() {
    if !qemu_perf() || !tools_available(&["g++"]) {
        return;
    }
    let d = scratch();
    let exe = compile(
        d.path(),
        "strings",
        "strings.cc",
        STRING_FRAMES_CC,
        &["g++", "-O2"],
    )
    .unwrap();
    let prog = SimProgram::record("c++ string frames", d.path(), &[&exe])
        .unwrap_or_else(|e| panic!("recording failed: {e:#}"));
    check_variants(&prog, &unwinding_floors(&prog, 32 << 10, 1.0));
}

/// A recursive-descent parser whose every level owns an object with a destructor, thrown
/// from the deepest level and caught in `main` (issue 25): each level's landing pad runs
/// its cleanup and calls `_Unwind_Resume`, which lands in the *next outer* level's pad.
const RECURSIVE_CLEANUPS_CC: &str =
    include_str!("../../../tests/realworld/programs/recursive_cleanups.cpp");

#[test]
fn cpp_recursive_cleanups() {
    if !qemu_perf() || !tools_available(&["g++"]) {
        return;
    }
    let d = scratch();
    let exe = compile(
        d.path(),
        "recursive",
        "recursive.cc",
        RECURSIVE_CLEANUPS_CC,
        &["g++", "-O2"],
    )
    .unwrap();
    let prog = SimProgram::record("c++ recursive cleanups", d.path(), &[&exe])
        .unwrap_or_else(|e| panic!("recording failed: {e:#}"));
    // Issue 25's goal, held in every variant: 99.9 % exact (outside the gaps with decode
    // errors). Before it, 95.1 % full (ptsim's truth also landed `parse_flat`'s pads one
    // level too deep) and 96.2 % with late faults (a resume right after a gap landed in
    // the frame that called `_Unwind_Resume`).
    let mut floors = unwinding_floors(&prog, 32 << 10, 1.0);
    for (_, _, floor) in floors.iter_mut().take(3) {
        floor.exact = 0.999;
    }
    check_variants(&prog, &floors);
}

/// Ordinary code leaving a leaf straight into an ancestor (issue 25): `__builtin_longjmp`
/// (an indirect `jmp` from the leaf into the catcher's body) and a context switch by `ret`
/// into a saved frame, through a recursion of varying depth; no unwinder or `longjmp` by
/// name on the way.
const HAND_UNWIND_C: &str = include_str!("../../../tests/realworld/programs/hand_unwind.c");

#[test]
fn c_hand_written_unwinds() {
    if !qemu_perf() || !tools_available(&["cc"]) {
        return;
    }
    let d = scratch();
    let exe = compile(
        d.path(),
        "unwinds",
        "unwinds.c",
        HAND_UNWIND_C,
        &["cc", "-O1", "-fno-optimize-sibling-calls"],
    )
    .unwrap();
    let prog = SimProgram::record("c hand-written unwinds", d.path(), &[&exe])
        .unwrap_or_else(|e| panic!("recording failed: {e:#}"));
    let mut floors = unwinding_floors(&prog, 8 << 10, 1.0);
    for (_, _, floor) in floors.iter_mut().take(3) {
        floor.exact = 0.999;
    }
    check_variants(&prog, &floors);
}
