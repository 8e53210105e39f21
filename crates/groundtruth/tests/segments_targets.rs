//! The segments writer's fidelity targets, on every standard scenario and several seeds:
//! ≥ 99.9 % exact on clean traces; on perturbed ones at least as good as the legacy
//! writer (exact, root and suffix where the root is never seen); no phantom frames.

use ptscope_groundtruth::gen::{generate, standard_specs};
use ptscope_groundtruth::{evaluate, legacy_writer, segments_guessing_writer, segments_writer};

#[test]
fn segments_meets_its_targets() {
    let mut report = String::new();
    let mut failures = Vec::new();
    for seed in 1..=4 {
        for spec in standard_specs(seed) {
            let sc = generate(&spec);
            let seg = evaluate(&sc, segments_writer);
            let leg = evaluate(&sc, legacy_writer);
            report.push_str(&format!(
                "seed {seed} {:<24} exact {:6.2} vs {:6.2}  root {:6.2} vs {:6.2}  phantom {}\n",
                spec.name,
                seg.exact * 100.0,
                leg.exact * 100.0,
                seg.root_correct * 100.0,
                leg.root_correct * 100.0,
                seg.phantom_frames
            ));
            let clean = !spec.name.contains("snapshot")
                && !spec.name.contains("gaps")
                && !spec.name.contains("bursts")
                && spec.name != "multi_thread"
                && spec.name != "exceptions"
                && !spec.name.starts_with("go_switches");
            if clean && seg.exact < 0.999 {
                failures.push(format!(
                    "seed {seed} {}: exact {:.4} < 0.999",
                    spec.name, seg.exact
                ));
            }
            // Inside a decode-error gap nobody can know the stack (both writers guess;
            // FIDELITY.md shows the totals too), so the comparison is made outside gaps.
            if seg.exact_outside_gaps + 1e-9 < leg.exact_outside_gaps {
                failures.push(format!(
                    "seed {seed} {}: exact (outside gaps) below legacy",
                    spec.name
                ));
            }
            // Go with the thread's goroutine rooted in `_start` (unlike real Go): without
            // goroutine identity neither writer knows which goroutine resumed; legacy keeps
            // `_start` under every one (right whenever that goroutine runs), segments keeps
            // the goroutines' shared root when the stacks do not line up. Documented in
            // FIDELITY.md; exact and phantoms are still checked.
            if spec.name != "go_switches_thread_root" && seg.root_correct + 1e-9 < leg.root_correct
            {
                failures.push(format!("seed {seed} {}: root below legacy", spec.name));
            }
            if spec.name == "snapshot" && seg.suffix_correct <= leg.suffix_correct {
                failures.push(format!(
                    "seed {seed} snapshot: suffix not better than legacy"
                ));
            }
            if seg.phantom_frames != 0 {
                failures.push(format!(
                    "seed {seed} {}: {} phantom frames",
                    spec.name, seg.phantom_frames
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}\n{report}", failures.join("\n"));
}

/// Goroutine switches are where segments guesses most (which goroutine resumed): over
/// many seeds its guesses must never show a frame that did not exist, and it must be
/// exact at least as often as legacy.
#[test]
fn goroutine_switches_show_no_phantoms() {
    let mut failures = Vec::new();
    for seed in 1..=24 {
        let go: Vec<_> = standard_specs(seed)
            .into_iter()
            .filter(|s| s.name.starts_with("go_switches"))
            .collect();
        assert_eq!(go.len(), 2, "the two go_switches scenarios");
        for spec in go {
            let name = spec.name;
            let sc = generate(&spec);
            let seg = evaluate(&sc, segments_writer);
            let leg = evaluate(&sc, legacy_writer);
            if seg.phantom_frames != 0 {
                failures.push(format!(
                    "seed {seed} {name}: {} phantom frames",
                    seg.phantom_frames
                ));
            }
            if seg.exact + 1e-9 < leg.exact {
                failures.push(format!(
                    "seed {seed} {name}: exact {:.4} below legacy {:.4}",
                    seg.exact, leg.exact
                ));
            }
            // Every goroutine rooted in `runtime.goexit`, as in real Go: the root is
            // never lost, whichever goroutine resumes.
            if name == "go_switches" && seg.root_correct + 1e-9 < leg.root_correct {
                failures.push(format!(
                    "seed {seed} {name}: root {:.4} below legacy {:.4}",
                    seg.root_correct, leg.root_correct
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Issue 25's floors over seeds 1-16 (FIDELITY.md, "Control that skips frames"):
/// ordinary code jumping or returning straight into an ancestor is exact on clean
/// traces (42.98 % mean before the fix); bursts of decode errors are ≥ 95 % exact or
/// marked outside the gaps on every seed of `storm_bursts` (94.43 % mean exact before,
/// 97.11 % with the guess, three seeds lower where a gap's returns are unknowable; the
/// marker frame, the default since, stands there: 99.75 %, every seed ≥ 98.80 %) and of
/// `overflow_bursts`; no scenario shows a phantom frame.
#[test]
fn issue_25_floors_hold_over_sixteen_seeds() {
    let mut failures = Vec::new();
    let mut report = String::new();
    let mut storm = Vec::new();
    let mut unwind_roots = Vec::new();
    for seed in 1..=16 {
        for spec in standard_specs(seed) {
            let name = spec.name;
            if ![
                "unwind_jumps",
                "storm_bursts",
                "overflow_bursts",
                "unwind_jumps_gaps",
            ]
            .contains(&name)
            {
                continue;
            }
            let seg = evaluate(&generate(&spec), segments_writer);
            // Where the trace cannot decide, the marker frame (the default) stands: it
            // counts as right where it stands for true frames (issue 25: "a marker frame,
            // never an invented function").
            let exact = seg.exact_or_marked_outside_gaps;
            report.push_str(&format!(
                "seed {seed} {name:<16} exact or marked outside gaps {:6.2}\n",
                exact * 100.0
            ));
            match name {
                "unwind_jumps" if seg.exact < 0.999 => failures.push(format!(
                    "seed {seed} {name}: exact {:.4} < 0.999",
                    seg.exact
                )),
                "overflow_bursts" if exact < 0.95 => failures.push(format!(
                    "seed {seed} {name}: exact or marked outside gaps {exact:.4} < 0.95"
                )),
                "storm_bursts" => storm.push(exact),
                // A return past the root of a segment begun by a gap, into a function
                // no carried frame runs, keeps the carried root (seed 15: 73.57 % root
                // when it closed them, 87.57 % now; mean 91.56 -> 92.44 %).
                "unwind_jumps_gaps" => {
                    if seg.root_correct < 0.74 {
                        failures.push(format!(
                            "seed {seed} {name}: root {:.4} < 0.74",
                            seg.root_correct
                        ));
                    }
                    unwind_roots.push(seg.root_correct);
                }
                _ => {}
            }
            if seg.phantom_frames != 0 {
                failures.push(format!(
                    "seed {seed} {name}: {} phantom frames",
                    seg.phantom_frames
                ));
            }
        }
    }
    assert_eq!(storm.len(), 16, "one storm_bursts scenario per seed");
    let unwind_root = unwind_roots.iter().sum::<f64>() / unwind_roots.len().max(1) as f64;
    if unwind_root < 0.92 {
        failures.push(format!(
            "unwind_jumps_gaps: mean root {unwind_root:.4} < 0.92"
        ));
    }
    let mean = storm.iter().sum::<f64>() / storm.len() as f64;
    if mean < 0.95 {
        failures.push(format!(
            "storm_bursts: mean exact or marked outside gaps {mean:.4} < 0.95"
        ));
    }
    // Every seed, with the marker the default (the guess: 13 of 16, seeds 4, 5 and 14 at
    // 94.49, 69.92 and 94.67 %, where a gap's returns are unknowable).
    let good = storm.iter().filter(|&&e| e >= 0.95).count();
    if good < 16 {
        failures.push(format!(
            "storm_bursts: {good} of 16 seeds >= 0.95 (want 16)"
        ));
    }
    assert!(failures.is_empty(), "{}\n{report}", failures.join("\n"));
}

/// The marker frame (`WriterConfig::mark_unknown_frames`) stands where decode errors
/// leave carried frames unproven (issue 25): counted as any run of true frames, it is
/// never worse than the guess it replaces outside the gaps, on bursts and gaps of every
/// seed 1-16, and it is no phantom (`decode_error_gaps` seed 16: 49.37 % carried, 100 %
/// marked). `storm_bursts` seed 14 is 94.67 % exact outside gaps
/// with the guess and 100 % exact-or-marked (a short segment's `fn_33` carried under the
/// next one, where the truth had returned from it and `free`: which gap they returned in,
/// the trace does not say); seed 15 99.74 -> 99.82 % (`main` carried under `fn_22`).
/// Seed 5: 69.92 % with the guess, and 70.18 % marked while a segment of the next storm,
/// 22 µs on, "proved" the carried `fn_35` by that one name (the function called again);
/// past its burst a proof needs two frames, and the marker stands there (99.68 %).
/// Seed 4: 94.90 % while a short segment lined up by one name with the inner level of
/// `fn_28 > fn_28` (the truth: `free > fn_28`, the inner one returned in the gap); the
/// two levels give way to the marker when no later segment lines up with both (99.74 %).
/// With unplaced jumps (`unwind_jumps_gaps`) too, and the root no worse: seed 9 was
/// 73.00 % exact or marked against 76.93 % carried, root 74.05 against 77.89 %, while a
/// frame's proof stopped at the first segment begun by such a jump.
#[test]
fn the_marker_frame_claims_nothing_false_in_bursts() {
    let mut failures = Vec::new();
    for seed in 1..=16 {
        for spec in standard_specs(seed) {
            let name = spec.name;
            let scenarios = [
                "storm_bursts",
                "overflow_bursts",
                "decode_error_gaps",
                "snapshot_gaps_bursts",
                "unwind_jumps_gaps",
            ];
            if !scenarios.contains(&name) {
                continue;
            }
            let sc = generate(&spec);
            let guess = evaluate(&sc, segments_guessing_writer);
            let marked = evaluate(&sc, segments_writer);
            let (g, m) = (
                guess.exact_outside_gaps,
                marked.exact_or_marked_outside_gaps,
            );
            if m + 1e-9 < g {
                failures.push(format!("seed {seed} {name}: marked {m:.4} < guess {g:.4}"));
            }
            if marked.root_correct + 1e-9 < guess.root_correct {
                failures.push(format!(
                    "seed {seed} {name}: root marked {:.4} < guess {:.4}",
                    marked.root_correct, guess.root_correct
                ));
            }
            if marked.phantom_frames != 0 {
                failures.push(format!(
                    "seed {seed} {name}: {} phantom frames",
                    marked.phantom_frames
                ));
            }
            let floor = match (seed, name) {
                (4, "storm_bursts") | (5, "storm_bursts") => 0.995,
                (14, "storm_bursts") => 0.999,
                (15, "storm_bursts") => 0.998,
                (16, "decode_error_gaps") => 0.999,
                _ => 0.0,
            };
            if m < floor {
                failures.push(format!("seed {seed} {name}: marked {m:.4} < {floor}"));
            }
            if marked.marker_frames == 0 && name == "storm_bursts" {
                failures.push(format!("seed {seed} {name}: no marker frame"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A new stack that shares a function with the open one under other callers (FIDELITY.md,
/// "Where segments guesses"): `decode_error_gaps` seed 4's second segment runs
/// `fn_30 > fn_33 > vec_grow > hash_find > …` after a gap that returned from the open
/// `vec_grow > hash_find > …` to `_start`. Carrying every open frame under it put two
/// `vec_grow > hash_find` on one stack (12.86 % exact and suffix); dropping them all
/// lost the root (57 %); carrying only `_start` is what happened.
#[test]
fn a_shared_function_under_other_callers_is_not_carried() {
    let spec = standard_specs(4)
        .into_iter()
        .find(|s| s.name == "decode_error_gaps")
        .expect("decode_error_gaps is a standard scenario");
    let seg = evaluate(&generate(&spec), segments_writer);
    assert!(
        seg.exact >= 0.55 && seg.suffix_correct >= 0.55 && seg.root_correct >= 0.999,
        "exact {:.4}, suffix {:.4}, root {:.4} (12.86 / 12.86 / 100 % carrying every \
         open frame, 12.86 / 55.90 / 56.96 % carrying none)",
        seg.exact,
        seg.suffix_correct,
        seg.root_correct
    );
}
