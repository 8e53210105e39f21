//! Prints the fidelity table (Markdown) of every standard scenario.
//!
//! `cargo run -p ptscope-groundtruth --release --bin fidelity -- [--seed N] [--writer NAME]...`
//!
//! `--sim` instead records the test programs with ptsim (needs qemu-user, perf, cc, c++)
//! and prints the whole-pipeline table of FIDELITY.md's simulated section.
//!
//! `--sim-explain PROGRAM VARIANT [--writer legacy|segments] [--limit N] [--not-suffix]`
//! records one program, simulates one variant and prints, per thread, the writer's exact
//! / suffix / root shares, where the mismatching time goes, and its first N mismatching
//! intervals (truth against reconstruction; with `--not-suffix` only those that are not
//! even a suffix of the truth), each with the decoded events just before it. PROGRAM is
//! one of the table's or a C/C++ source file (`tests/realworld/programs/…`, built with
//! `cc -O1` / `c++ -O2` unless `--cc 'g++ -O1'`); VARIANT is one of the table's or the
//! corpus's `spread faults` / `late faults`.
//!
//! `--sim-sweep PROGRAM N [--cc 'COMPILER FLAGS']` records PROGRAM once and scores N
//! placements of its 8 late decode errors, each placement moving all of them by 1/N of
//! their spacing (so together they fall on every step once): the table of each
//! placement's exact share outside the gaps, then the ones below 99.9 %.

use ptscope_groundtruth::{
    evaluate, gen, legacy_writer, reconstruct, score, segments_guessing_writer,
    segments_marked_writer, segments_writer, Fidelity, Scenario,
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
        "segments-marked" => reconstruct(&sc, segments_marked_writer),
        "segments-guess" => reconstruct(&sc, segments_guessing_writer),
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
    ("segments-marked", |s| evaluate(s, segments_marked_writer)),
    ("segments-guess", |s| evaluate(s, segments_guessing_writer)),
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
            "--sim-sweep" => {
                let (Some(program), Some(n)) =
                    (args.next(), args.next().and_then(|n| n.parse().ok()))
                else {
                    eprintln!("usage: fidelity --sim-sweep PROGRAM N [--cc 'COMPILER FLAGS']");
                    std::process::exit(2)
                };
                let (mut cc, mut explain) = (None, None);
                while let Some(a) = args.next() {
                    match a.as_str() {
                        "--cc" => cc = args.next(),
                        // The first mismatches of each placement below 99.9 %.
                        "--explain" => {
                            explain = Some(Explain {
                                writer: "segments".into(),
                                limit: args.next().and_then(|n| n.parse().ok()).unwrap_or(6),
                                not_suffix: false,
                                events: None,
                                around_gaps: 3,
                                cc: None,
                            })
                        }
                        _ => {
                            eprintln!("--sim-sweep takes --cc 'COMPILER FLAGS' and --explain N");
                            std::process::exit(2)
                        }
                    }
                }
                sim_sweep(&program, n, cc.as_deref(), explain.as_ref());
                return;
            }
            "--sim-explain" => {
                let (Some(program), Some(variant)) = (args.next(), args.next()) else {
                    eprintln!(
                        "usage: fidelity --sim-explain PROGRAM VARIANT [--writer W] [--limit N]"
                    );
                    std::process::exit(2)
                };
                let mut o = Explain {
                    writer: "segments".to_string(),
                    limit: 20,
                    not_suffix: false,
                    events: None,
                    around_gaps: 0,
                    cc: None,
                };
                while let Some(a) = args.next() {
                    match a.as_str() {
                        "--writer" => o.writer = args.next().expect("--writer W"),
                        "--limit" => {
                            o.limit = args.next().and_then(|n| n.parse().ok()).expect("--limit N")
                        }
                        "--not-suffix" => o.not_suffix = true,
                        "--cc" => o.cc = Some(args.next().expect("--cc 'COMPILER FLAGS'")),
                        "--around-gaps" => {
                            o.around_gaps = args
                                .next()
                                .and_then(|n| n.parse().ok())
                                .expect("--around-gaps N")
                        }
                        "--events" => {
                            let mut t = || args.next().and_then(|n| n.parse().ok());
                            o.events = Some((
                                t().expect("--events FROM TO"),
                                t().expect("--events FROM TO"),
                            ))
                        }
                        _ => {
                            eprintln!("--sim-explain takes --writer W, --limit N, --not-suffix, --events FROM TO, --around-gaps N, --cc 'COMPILER FLAGS'");
                            std::process::exit(2)
                        }
                    }
                }
                sim_explain(&program, &variant, &o);
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
        // The marker writer only on request (`--writer segments-marked`).
        chosen = WRITERS[..2].iter().map(|w| w.0.to_string()).collect();
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
            " {name} exact % | {name} order-exact % | {name} suffix % | {name} root % | {name} exact % (no gaps) | {name} strict % | {name} phantom | {name} inferred | {name} exact or marked % (no gaps) | {name} markers |"
        );
        rule += "---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";
    }
    println!("{header}\n{rule}");
    for spec in gen::standard_specs(seed) {
        let sc = gen::generate(&spec);
        let mut row = format!("| {} | {} |", sc.name, sc.events.len());
        for (_, run) in &writers {
            let f = run(&sc);
            row += &format!(
                " {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                pct(f.exact),
                pct(f.exact_order),
                pct(f.suffix_correct),
                pct(f.root_correct),
                pct(f.exact_outside_gaps),
                pct(f.exact_strict),
                f.phantom_frames,
                f.inferred_frames,
                pct(f.exact_or_marked_outside_gaps),
                f.marker_frames
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
    let tmp = ptsim::testing::scratch_dir("fidelity-sim").expect("scratch directory");
    let dir = tmp.path();
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

/// One decoded event on one line: time, kind, source and destination with their symbols.
fn event_line(e: &ptscope_event::Event, strings: &ptscope_event::StringTable) -> String {
    use ptscope_event::{Event, EventData, Location, Symbol};
    let loc = |l: &Location| {
        let name = match l.symbol {
            Symbol::FromPerf(s) => strings.get(s),
            Symbol::Unknown => "?",
            Symbol::Untraced => "[untraced]",
            Symbol::Returned => "[returned]",
            Symbol::Syscall => "[syscall]",
            Symbol::OffCpu | Symbol::Preempted => "[off-cpu]",
        };
        format!("{name}+{:#x} ({:#x})", l.offset, l.ip)
    };
    match e {
        Event::Ok { time, data, .. } => match data {
            EventData::Trace {
                change,
                kind,
                src,
                dst,
            } => format!(
                "{time} {}{} {} -> {}",
                kind.map_or(String::new(), |k| format!("{k:?}")),
                change.map_or(String::new(), |c| format!(" {c:?}")),
                loc(strings.location(*src)),
                loc(strings.location(*dst))
            ),
            other => format!("{time} {other:?}"),
        },
        Event::DecodeError {
            time, ip, message, ..
        } => format!(
            "{} decode error at {ip:x?}: {}",
            time.map_or("-".to_string(), |t| t.to_string()),
            strings.get(*message)
        ),
    }
}

/// Records `program`, simulates `variant` and prints `writer`'s scores per thread with its
/// first `limit` mismatching intervals and the events before each (debugging aid; times
/// are perf's, in ns, as the scorer sees them divided by `SCALE`).
/// Records `program` once under ptsim: one of the table's programs, or a C/C++ source of
/// the corpus (tests/realworld/programs), built with `cc` (default `cc -O1` for C, `c++
/// -O2` for C++). The recording is kept (in a scratch directory named after `what`).
fn record_program(
    program: &str,
    cc: Option<&str>,
    what: &str,
) -> ptscope_groundtruth::sim::SimProgram {
    // A program of the table, or a C/C++ source of the corpus (tests/realworld/programs),
    // built the way its test builds it (`cc`).
    let source = std::path::Path::new(program);
    let (name, file, src, cc): (&str, &str, String, Vec<&str>) =
        match programs::PROGRAMS.iter().find(|p| p.0 == program) {
            Some(p) => (p.0, p.1, p.2.to_string(), p.3.to_vec()),
            None if source.is_file() => {
                let file = source
                    .file_name()
                    .and_then(|f| f.to_str())
                    .unwrap_or("prog.c");
                let cc = match cc {
                    Some(cc) => cc.split_whitespace().collect(),
                    None if file.ends_with(".c") => vec!["cc", "-O1"],
                    None => vec!["c++", "-O2"],
                };
                let text = std::fs::read_to_string(source).expect("readable source");
                (file.split('.').next().unwrap_or("prog"), file, text, cc)
            }
            None => {
                eprintln!(
                    "unknown program {program} (one of: {}, or a C/C++ source file)",
                    programs::PROGRAMS.map(|p| p.0).join(", ")
                );
                std::process::exit(2)
            }
        };
    // Kept: the recording it prints is there to be looked at.
    let dir = ptsim::testing::scratch_dir(what)
        .expect("scratch directory")
        .keep();
    let pdir = dir.join(name);
    std::fs::create_dir_all(&pdir).expect("program directory");
    let exe = ptsim::testing::compile(&pdir, name, file, &src, &cc).expect("compiles");
    ptscope_groundtruth::sim::SimProgram::record(name, &pdir, &[&exe]).expect("records")
}

/// `--sim-sweep PROGRAM N`: records PROGRAM once and scores N placements of its late
/// faults (`SimProgram::late_faults_at`) through the text path, legacy and segments,
/// exact outside the gaps; then the placements below 99.9 % and the worst.
fn sim_sweep(program: &str, placements: usize, cc: Option<&str>, explain: Option<&Explain>) {
    use ptscope_groundtruth::sim::{
        decode, legacy, reconstruct_decoded, segments, thread_truths, DecodePath,
    };
    let prog = record_program(program, cc, "fidelity-sim-sweep");
    println!("| placement | legacy exact % (no gaps) | segments exact % (no gaps) | segments suffix % | segments phantom |");
    println!("|---:|---:|---:|---:|---:|");
    let mut scores = Vec::new();
    for p in 0..placements {
        let cfg = prog.late_faults_at(p, placements);
        let variant = format!("sweep-{p}");
        let (timelines, data) = match prog.simulate(&variant, &cfg) {
            Ok(x) => x,
            Err(e) => {
                eprintln!("placement {p}: {e:#}");
                continue;
            }
        };
        let d = decode(&data, DecodePath::Text).expect("decodes");
        let truth = thread_truths(&timelines, &d);
        let l = score(&truth, &reconstruct_decoded(&d, legacy));
        let g = score(&truth, &reconstruct_decoded(&d, segments));
        println!(
            "| {p} | {} | {} | {} | {} |",
            pct(l.exact_outside_gaps),
            pct(g.exact_outside_gaps),
            pct(g.suffix_correct),
            g.phantom_frames
        );
        if let Some(dir) = data.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
        scores.push((p, g.exact_outside_gaps, l.exact_outside_gaps));
    }
    let below: Vec<_> = scores.iter().filter(|s| s.1 < 0.999).collect();
    if let Some(o) = explain {
        for &&(p, _, _) in &below {
            println!("\n## placement {p}");
            let variant = format!("late faults@{p}/{placements}");
            explain_recorded(&prog, &variant, &prog.late_faults_at(p, placements), o);
        }
    }
    let worst = scores.iter().map(|s| s.1).fold(1.0, f64::min);
    println!(
        "\n{} placements; segments below 99.9 %: {} {:?}; worst {}; segments below legacy: {}",
        scores.len(),
        below.len(),
        below.iter().map(|s| (s.0, pct(s.1))).collect::<Vec<_>>(),
        pct(worst),
        scores.iter().filter(|s| s.1 + 1e-9 < s.2).count()
    );
}

/// `--sim-explain`'s options.
struct Explain {
    /// The writer explained.
    writer: String,
    /// How many mismatching intervals to print.
    limit: usize,
    /// Only intervals whose stack is not even a suffix of the truth.
    not_suffix: bool,
    /// Print the decoded events between these perf times (ns).
    events: Option<(u64, u64)>,
    /// Print this many events either side of each decode error.
    around_gaps: usize,
    /// The compiler command for a source file given as the program.
    cc: Option<String>,
}

fn sim_explain(program: &str, variant: &str, o: &Explain) {
    use ptscope_groundtruth::sim::{spread_faults, variants};
    let prog = record_program(program, o.cc.as_deref(), "fidelity-sim-explain");
    // The table's variants, and the corpus's for programs with signals and unwinding.
    let mut all = variants(8192, prog.main_steps);
    all.push(("spread faults", spread_faults()));
    if prog.main_entry_step > 0 {
        all.push(("late faults", prog.late_faults()));
        // A placement of `--sim-sweep`: `late faults@P/N`.
        let placement = variant
            .strip_prefix("late faults@")
            .and_then(|pn| pn.split_once('/'))
            .and_then(|(p, n)| Some((p.parse().ok()?, n.parse().ok()?)));
        if let Some((p, n)) = placement.filter(|&(p, n): &(usize, usize)| n > 0 && p < n) {
            all.push((variant, prog.late_faults_at(p, n)));
        }
    }
    let Some((_, cfg)) = all.into_iter().find(|v| v.0 == variant) else {
        eprintln!("unknown variant {variant} (full, snapshot, faults, snapshot+faults, spread faults, late faults)");
        std::process::exit(2)
    };
    explain_recorded(&prog, variant, &cfg, o);
}

/// The body of `--sim-explain` for a program already recorded: simulates `variant`
/// (`cfg`) and prints the writer's mismatches.
fn explain_recorded(
    prog: &ptscope_groundtruth::sim::SimProgram,
    variant: &str,
    cfg: &ptsim::SimConfig,
    o: &Explain,
) {
    use ptscope_groundtruth::sim::{
        decode, legacy, reconstruct_decoded, segments, thread_truths, DecodePath, SCALE,
    };
    let (writer, limit, not_suffix, events_between, around_gaps) = (
        o.writer.as_str(),
        o.limit,
        o.not_suffix,
        o.events,
        o.around_gaps,
    );
    let (timelines, data) = prog.simulate(variant, cfg).expect("simulates");
    let d = decode(&data, DecodePath::Text).expect("decodes");
    let truth = thread_truths(&timelines, &d);
    let recon = match writer {
        "legacy" => reconstruct_decoded(&d, legacy),
        "segments" => reconstruct_decoded(&d, segments),
        _ => {
            eprintln!("unknown writer {writer}");
            std::process::exit(2)
        }
    };
    println!("recording: {}", data.display());
    let total = score(&truth, &recon);
    println!(
        "{writer}: exact {} suffix {} root {} phantom {}",
        pct(total.exact),
        pct(total.suffix_correct),
        pct(total.root_correct),
        total.phantom_frames
    );
    let ns = |x: u64| x as f64 / SCALE as f64;
    for t in &truth {
        let Some(r) = recon.iter().find(|r| r.thread == t.thread) else {
            println!("{:?}: no track", t.thread);
            continue;
        };
        let f = score(std::slice::from_ref(t), std::slice::from_ref(r));
        let gaps: Vec<(f64, f64)> = t.gaps.iter().map(|g| (ns(g.0), ns(g.1))).collect();
        println!(
            "\n{:?}: {:.1}..{:.1} ns, exact {} suffix {} root {}, {} events, gaps {gaps:?}",
            t.thread,
            ns(t.start()),
            ns(t.end()),
            pct(f.exact),
            pct(f.suffix_correct),
            pct(f.root_correct),
            d.events.iter().filter(|e| e.thread() == t.thread).count()
        );
        for p in &f.phantoms {
            println!("phantom: {p:?}");
        }
        if let Some((from, to)) = events_between {
            // The raw material of one stretch: what the writer was given.
            for e in d.events.iter().filter(|e| {
                e.thread() == t.thread && e.time().is_some_and(|x| x >= from && x <= to)
            }) {
                println!("  event {}", event_line(e, &d.strings));
            }
        }
        let events: Vec<&ptscope_event::Event> =
            d.events.iter().filter(|e| e.thread() == t.thread).collect();
        // Each decode error with the events either side and both stacks just before the
        // error and at the first event after it: how the writer joined the two sides.
        let truth_at = |x: u64| {
            t.timeline
                .iter()
                .find(|p| p.0 <= x && x < p.1)
                .map_or(String::new(), |p| p.2.join(" > "))
        };
        let recon_at = |x: u64| {
            r.timeline
                .iter()
                .find(|p| p.0 <= x as i64 && (x as i64) < p.1)
                .map_or(String::new(), |p| p.2.join(" > "))
        };
        for (i, e) in events.iter().enumerate().filter(|(_, e)| {
            around_gaps > 0 && matches!(e, ptscope_event::Event::DecodeError { .. })
        }) {
            for e in &events[i.saturating_sub(around_gaps)..i] {
                println!("    event {}", event_line(e, &d.strings));
            }
            if let Some(x) = e.time().map(|x| x * SCALE) {
                // Half a nanosecond before: the stack as the error found it.
                let before = x.saturating_sub(SCALE / 2);
                println!("  before the error\n    truth: {}", truth_at(before));
                println!("    recon: {}", recon_at(before));
            }
            for e in &events[i..(i + around_gaps + 1).min(events.len())] {
                println!("    event {}", event_line(e, &d.strings));
            }
            if let Some(x) = events.get(i + 1).and_then(|e| e.time()).map(|x| x * SCALE) {
                println!("  at the next event\n    truth: {}", truth_at(x));
                println!("    recon: {}", recon_at(x));
            }
        }
        // Where the time goes: mismatching time grouped by (true root, shown root) and by
        // the length difference of the stacks, largest first.
        let all = score::mismatches(t, r, usize::MAX);
        let mut kinds: std::collections::HashMap<(String, String, i64, bool), u64> =
            std::collections::HashMap::new();
        for m in &all {
            let root = |s: &[String]| s.first().cloned().unwrap_or_else(|| "(empty)".into());
            let diff = m.recon.len() as i64 - m.truth.len() as i64;
            *kinds
                .entry((root(&m.truth), root(&m.recon), diff, m.suffix))
                .or_default() += m.end - m.start;
        }
        let mut kinds: Vec<_> = kinds.into_iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        for ((tr, rr, diff, suffix), d) in kinds.iter().take(8) {
            println!(
                "  mismatch time {:.1} ns: true root {tr}, shown root {rr}, depth {diff:+}{}",
                ns(*d),
                if *suffix { ", a suffix" } else { "" }
            );
        }
        for m in all
            .into_iter()
            .filter(|m| !(not_suffix && m.suffix))
            .take(limit)
        {
            println!(
                "{:.3}..{:.3} ({:.3} ns)\n  truth: {}\n  recon: {}",
                ns(m.start),
                ns(m.end),
                ns(m.end - m.start),
                m.truth.join(" > "),
                m.recon.join(" > ")
            );
            // The events up to the mismatch's start: what the writer had seen.
            let at = events.partition_point(|e| e.time().is_none_or(|x| x * SCALE <= m.start));
            for e in &events[at.saturating_sub(4)..at] {
                println!("    event {}", event_line(e, &d.strings));
            }
        }
    }
}
