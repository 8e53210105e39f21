//! Records one command under ptsim and scores one recording variant through both decode
//! paths and both writers, printing the scores and the scorer's own cost: the measurement
//! behind BENCHMARKS.md's "Simulated-PT scorer" section.
//!
//! ```sh
//! cargo run -p ptscope-groundtruth --release --example score_recording -- \
//!     [--variant full|snapshot=BYTES|faults] [--truth-first] -- /usr/bin/python3 -I -S script.py
//! ```
//!
//! `--truth-first` first builds the variant's truth alone (simulation, perf's decode of
//! the branches, alignment, interned stacks) and reports its peak, to tell ptsim's share
//! of the memory from the decoders', writers' and scorer's.
//!
//! Peak RSS is read from `/proc/self/status` (`VmHWM`) after recording and again after
//! scoring, with the peak reset in between (`/proc/self/clear_refs`), so the scoring
//! figure is the scorer's own (the recording step holds ptsim's whole simulation).

use ptscope_groundtruth::sim::SimProgram;
use ptsim::SimConfig;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Peak resident set size of this process so far, in kB.
fn peak_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Resets the peak RSS (Linux: writing 5 to `clear_refs`), so the next phase's peak is its own.
fn reset_peak() {
    if let Err(e) = std::fs::write("/proc/self/clear_refs", "5") {
        eprintln!("cannot reset the peak RSS ({e}): the scoring peak includes recording");
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: score_recording [--variant full|snapshot=BYTES|faults] [--truth-first] -- PROGRAM [ARGS...]"
    );
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut variant = "full".to_string();
    let mut truth_first = false;
    let mut argv: Vec<PathBuf> = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--variant" => variant = args.next().unwrap_or_else(|| usage()),
            "--truth-first" => truth_first = true,
            "--" => {
                argv = args.by_ref().map(PathBuf::from).collect();
            }
            _ => usage(),
        }
    }
    if argv.is_empty() {
        usage();
    }
    let cfg = match variant.as_str() {
        "full" => SimConfig::default(),
        "faults" => SimConfig {
            faults: ptsim::FaultSpec::parse("overflow=2,corrupt=2,overflow-len=50")
                .expect("valid faults"),
            ..SimConfig::default()
        },
        v => match v.strip_prefix("snapshot=").and_then(|b| b.parse().ok()) {
            Some(bytes) => {
                let mut c = SimConfig {
                    snapshot_size: Some(bytes),
                    ..SimConfig::default()
                };
                c.pt.psb_period = 4096;
                c
            }
            None => usage(),
        },
    };
    let dir = tempfile::Builder::new()
        .prefix("ptscope-score-recording-")
        .tempdir()
        .expect("cannot create a temporary directory");
    let name = argv[0]
        .file_name()
        .map_or("program".into(), |n| n.to_string_lossy().into_owned());
    let refs: Vec<&Path> = argv.iter().map(PathBuf::as_path).collect();
    let t0 = Instant::now();
    let prog = SimProgram::record(&name, dir.path(), &refs).unwrap_or_else(|e| {
        eprintln!("recording failed: {e:#}");
        std::process::exit(1)
    });
    let record_s = t0.elapsed().as_secs_f64();
    let record_kb = peak_kb();
    reset_peak();
    if truth_first {
        let t = Instant::now();
        let mut names = ptscope_groundtruth::Names::new();
        let (timelines, _) = prog
            .simulate_interned(&format!("{variant}-truth"), &cfg, &mut names)
            .unwrap_or_else(|e| {
                eprintln!("simulating failed: {e:#}");
                std::process::exit(1)
            });
        let pieces: usize = timelines.iter().map(|t| t.pieces.len()).sum();
        println!(
            "truth alone: {:.1} s, peak {} MB, {pieces} pieces, {} distinct stacks, {} frame names",
            t.elapsed().as_secs_f64(),
            peak_kb() / 1024,
            names.stacks(),
            names.frame_count()
        );
        drop(timelines);
        drop(names);
        let _ = std::fs::remove_dir_all(dir.path().join(format!("{variant}-truth")));
        reset_peak();
    }
    let t1 = Instant::now();
    let s = prog.score(&variant, &cfg).unwrap_or_else(|e| {
        eprintln!("scoring failed: {e:#}");
        std::process::exit(1)
    });
    let score_s = t1.elapsed().as_secs_f64();
    let score_kb = peak_kb();
    let (t, l, g) = (&s.text, &s.text.legacy, &s.text.segments);
    println!(
        "{name} {variant}: {} events, {} decode errors, text = dlfilter: {}",
        t.events,
        t.errors,
        s.paths_identical()
    );
    for (w, f) in [("legacy", l), ("segments", g)] {
        println!(
            "  {w:<8} exact {:.4} order {:.4} suffix {:.4} root {:.4} no-gaps {:.4} strict {:.4} phantom {} inferred {} frames {}",
            100.0 * f.exact,
            100.0 * f.exact_order,
            100.0 * f.suffix_correct,
            100.0 * f.root_correct,
            100.0 * f.exact_outside_gaps,
            100.0 * f.exact_strict,
            f.phantom_frames,
            f.inferred_frames,
            f.frames
        );
    }
    println!(
        "record: {record_s:.1} s, peak {} MB; simulate + decode (2 paths) + score: {score_s:.1} s, peak {} MB = {:.0} bytes per event",
        record_kb / 1024,
        score_kb / 1024,
        score_kb as f64 * 1024.0 / t.events.max(1) as f64
    );
}
