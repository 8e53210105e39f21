//! The whole pipeline on simulated Intel PT: real programs recorded by ptsim (full,
//! snapshot, with faults, snapshot with faults), decoded by ptscope through `perf script`
//! text and through the dlfilter, each writer scored against the true stacks.

use ptscope_groundtruth::sim::{variants, SimProgram, SimScore};
use ptsim::testing::{compile, scratch_dir, tools_available};

mod programs;
use programs::PROGRAMS;

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
    let tmp = scratch_dir("groundtruth-sim").unwrap();
    let dir = tmp.path().to_owned();
    let mut failures = Vec::new();
    for (name, file, src, cc) in PROGRAMS {
        let pdir = dir.join(name);
        std::fs::create_dir_all(&pdir).unwrap();
        let exe = compile(&pdir, name, file, src, cc).unwrap();
        let prog = SimProgram::record(name, &pdir, &[&exe]).unwrap();
        for (variant, cfg) in variants(8192, prog.main_steps) {
            let t0 = std::time::Instant::now();
            // SIM_DEBUG keeps the text path's truth and stacks to print mismatches.
            let debug = std::env::var_os("SIM_DEBUG").is_some();
            let s = if debug {
                prog.score_detailed(variant, &cfg)
            } else {
                prog.score(variant, &cfg)
            };
            let s = match s {
                Ok(s) => s,
                Err(e) => {
                    failures.push(format!("{name} {variant}: {e:#}"));
                    continue;
                }
            };
            report(&s);
            eprintln!("  ({:.1} s)", t0.elapsed().as_secs_f64());
            if let Some(d) = s.detail.as_ref() {
                for p in s.text.segments.phantoms.iter().take(5) {
                    eprintln!("  seg phantom {p:?}");
                }
                for t in &d.truth {
                    let first = t.timeline.first().map(|p| (p.0, p.1, d.names.names(p.2)));
                    eprintln!(
                        "  truth {:?} {}..{} pieces {} first {first:?}",
                        t.thread,
                        t.start(),
                        t.end(),
                        t.timeline.len(),
                    );
                    if let Some(r) = d.recon.1.iter().find(|r| r.thread == t.thread) {
                        let first = r.timeline.first().map(|p| (p.0, p.1, d.names.names(p.2)));
                        eprintln!("  recon first {first:?}");
                        for m in ptscope_groundtruth::score::mismatches_interned(t, r, &d.names, 6)
                        {
                            eprintln!(
                                "  mismatch {}..{} truth {:?}\n      recon {:?}",
                                m.start, m.end, m.truth, m.recon
                            );
                        }
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
            // A function without a symbol is named by its entry in the truth, but a writer
            // that only sees a return into it can name it only by that address: such
            // inferred frames are a naming limit, not a wrong stack.
            let real: Vec<_> = g
                .phantoms
                .iter()
                .filter(|p| !(p.inferred && p.name.starts_with("[unknown @ ")))
                .collect();
            if !real.is_empty() {
                fail(format!(
                    "segments phantoms: {:?}",
                    &real[..real.len().min(5)]
                ));
            }
            if g.missing_threads != 0 {
                fail(format!("{} threads without a track", g.missing_threads));
            }
            // Where the root is never seen, the reachable part must be at least as right.
            if variant == "snapshot" && g.suffix_correct < l.suffix_correct {
                fail(format!(
                    "segments suffix {:.4} below legacy {:.4}",
                    g.suffix_correct, l.suffix_correct
                ));
            }
            if variant == "full" && g.exact < 0.995 {
                fail(format!("segments exact {:.4} < 0.995", g.exact));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
