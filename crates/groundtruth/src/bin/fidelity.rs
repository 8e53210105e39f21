//! Prints the fidelity table (Markdown) of every standard scenario.
//!
//! `cargo run -p ptscope-groundtruth --release --bin fidelity -- [--seed N] [--writer NAME]...`
//!
//! `--sim` instead records the test programs with ptsim (needs qemu-user, perf, cc, c++)
//! and prints the whole-pipeline table of FIDELITY.md's simulated section.

use ptscope_groundtruth::{
    evaluate, gen, legacy_writer, reconstruct, score, segments_writer, Fidelity, Scenario,
};

/// Prints a writer's first mismatching intervals on one scenario (debugging aid).
fn explain(seed: u64, name: &str, writer: &str) {
    let Some(spec) = gen::standard_specs(seed)
        .into_iter()
        .find(|s| s.name == name)
    else {
        eprintln!("unknown scenario {name}");
        std::process::exit(2)
    };
    let sc = gen::generate(&spec);
    let recon = match writer {
        "segments" => reconstruct(&sc, segments_writer),
        _ => reconstruct(&sc, legacy_writer),
    };
    for t in &sc.truth {
        let Some(r) = recon.iter().find(|r| r.thread == t.thread) else {
            println!("{:?}: no track", t.thread);
            continue;
        };
        let f = score(std::slice::from_ref(t), std::slice::from_ref(r));
        println!(
            "{:?}: exact {:.4}, root {:.4}, {} tracks; gaps {:?}",
            t.thread,
            f.exact,
            f.root_correct,
            recon.iter().filter(|x| x.thread == t.thread).count(),
            t.gaps
        );
        for p in &f.phantoms {
            println!("phantom: {p:?}");
        }
        for m in score::mismatches(t, r, 100_000) {
            println!(
                "{}..{} ({} ns)\n  truth: {}\n  recon: {}",
                m.start,
                m.end,
                m.end - m.start,
                m.truth.join(" > "),
                m.recon.join(" > ")
            );
        }
    }
}

/// A writer the table can compare; adding one is one line in [`WRITERS`].
type Run = fn(&Scenario) -> Fidelity;

const WRITERS: &[(&str, Run)] = &[
    ("legacy", |s| evaluate(s, legacy_writer)),
    ("segments", |s| evaluate(s, segments_writer)),
];

fn pct(x: f64) -> String {
    format!("{:.2}", 100.0 * x)
}

fn main() {
    let mut seed = 1u64;
    let mut chosen: Vec<String> = Vec::new();
    let mut explained: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seed" => seed = args.next().and_then(|s| s.parse().ok()).expect("--seed N"),
            "--writer" => chosen.push(args.next().expect("--writer NAME")),
            "--explain" => explained = Some(args.next().expect("--explain SCENARIO")),
            "--sim" => {
                sim_table();
                return;
            }
            "--dump" => {
                // The scenario as `perf script` text, to replay with `ptscope decode`.
                let name = args.next().expect("--dump SCENARIO");
                let spec = ptscope_groundtruth::gen::standard_specs(seed)
                    .into_iter()
                    .find(|s| s.name == name)
                    .expect("a standard scenario");
                print!(
                    "{}",
                    ptscope_groundtruth::gen::generate(&spec).perf_script()
                );
                return;
            }
            _ => {
                eprintln!("usage: fidelity [--seed N] [--writer legacy|…]...");
                std::process::exit(2);
            }
        }
    }
    if chosen.is_empty() {
        chosen = WRITERS.iter().map(|w| w.0.to_string()).collect();
    }
    let writers: Vec<&(&str, Run)> = chosen
        .iter()
        .map(|c| {
            WRITERS.iter().find(|w| w.0 == c).unwrap_or_else(|| {
                eprintln!("unknown writer {c}");
                std::process::exit(2)
            })
        })
        .collect();

    if let Some(name) = explained {
        explain(seed, &name, chosen.first().map_or("legacy", |w| w.as_str()));
        return;
    }
    let mut header = String::from("| scenario | events |");
    let mut rule = String::from("|---|---:|");
    for (name, _) in &writers {
        header += &format!(
            " {name} exact % | {name} order-exact % | {name} suffix % | {name} root % | {name} exact % (no gaps) | {name} strict % | {name} phantom | {name} inferred |"
        );
        rule += "---:|---:|---:|---:|---:|---:|---:|---:|";
    }
    println!("{header}\n{rule}");
    for spec in gen::standard_specs(seed) {
        let sc = gen::generate(&spec);
        let mut row = format!("| {} | {} |", sc.name, sc.events.len());
        for (_, run) in &writers {
            let f = run(&sc);
            row += &format!(
                " {} | {} | {} | {} | {} | {} | {} | {} |",
                pct(f.exact),
                pct(f.exact_order),
                pct(f.suffix_correct),
                pct(f.root_correct),
                pct(f.exact_outside_gaps),
                pct(f.exact_strict),
                f.phantom_frames,
                f.inferred_frames
            );
        }
        println!("{row}");
    }
}

#[path = "../../tests/programs/mod.rs"]
mod programs;

/// Records each test program, scores every variant through both decode paths, prints
/// the Markdown table (text path numbers; the paths' equality is its own column).
fn sim_table() {
    use ptscope_groundtruth::sim::{variants, SimProgram};
    let dir = ptsim::testing::scratch_dir("fidelity-sim").expect("scratch directory");
    println!(
        "| program | variant | events | errors | text = dlfilter | legacy exact % | segments exact % | legacy suffix % | segments suffix % | legacy root % | segments root % | segments exact % (no gaps) | legacy phantom | segments phantom |"
    );
    println!("|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, file, src, cc) in programs::PROGRAMS {
        let pdir = dir.join(name);
        std::fs::create_dir_all(&pdir).expect("program directory");
        let exe = ptsim::testing::compile(&pdir, name, file, src, cc).expect("compiles");
        let prog = SimProgram::record(name, &pdir, &[&exe]).expect("records");
        for (variant, cfg) in variants(8192, prog.main_steps) {
            let s = match prog.score(variant, &cfg) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("{name} {variant}: {e:#}");
                    continue;
                }
            };
            let (l, g) = (&s.text.legacy, &s.text.segments);
            println!(
                "| {name} | {variant} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                s.text.events,
                s.text.errors,
                if s.paths_identical() { "yes" } else { "**no**" },
                pct(l.exact),
                pct(g.exact),
                pct(l.suffix_correct),
                pct(g.suffix_correct),
                pct(l.root_correct),
                pct(g.root_correct),
                pct(g.exact_outside_gaps),
                l.phantom_frames,
                g.phantom_frames
            );
        }
    }
}
