//! Damaged `perf.data` files (truncated, bit-flipped, zeroed ranges) decoded through
//! both decoders as the CLI opens them: each gives a trace (events) or a clear error,
//! never a panic, and the two paths never contradict each other on what they decoded.

mod common;

use common::*;
use ptscope_decode::RecordingKind;
use ptscope_dlfilter_reader::{open, Choice, DlfilterOptions};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// perf under a time limit, so a perf that loops on a damaged file fails instead of
/// hanging the test.
fn bounded_perf(dir: &Path) -> PathBuf {
    let p = dir.join("bounded-perf");
    executable::write_executable(&p, "#!/bin/sh\nexec timeout -k 5 120 perf \"$@\"\n");
    p
}

/// What one decoder made of a file.
#[derive(Debug)]
enum Outcome {
    /// Events, and the error that ended them if any.
    Events(Vec<String>, Option<String>),
    /// Nothing decoded: the error.
    Failed(String),
}

fn decode(data: &Path, perf: &Path, choice: Choice) -> Outcome {
    let mut o = DlfilterOptions::new(data);
    o.perf = perf.to_path_buf();
    o.kind = Some(RecordingKind::Sampling);
    let (mut s, _) = match open(&o, choice) {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let mut events = Vec::new();
    let mut error = None;
    loop {
        match s.next_event() {
            Ok(Some(e)) => events.push(norm(&e, s.strings())),
            Ok(None) => break,
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    if let Err(e) = s.finish() {
        error.get_or_insert(e.to_string());
    }
    if events.is_empty() {
        Outcome::Failed(error.unwrap_or_else(|| "no events and no error".into()))
    } else {
        Outcome::Events(events, error)
    }
}

#[test]
fn damaged_recordings_give_a_trace_or_a_clear_error_on_both_paths() {
    if !perf_usable("damaged_recordings_give_a_trace_or_a_clear_error_on_both_paths") {
        return;
    }
    let tmp = scratch("damaged");
    let dir = tmp.path();
    let exe = build_prog(dir, "prog");
    let data = dir.join("perf.data");
    let exe_s = exe.to_string_lossy().into_owned();
    record(
        &data,
        &["-e", "cpu-clock", "-c", "100000", "-g"],
        &[&exe_s, "60"],
    );
    let perf = bounded_perf(dir);
    let good = std::fs::read(&data).expect("read perf.data");
    let n = good.len();
    let mut rng = 0x0dd_ba11_u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for cut in [
        0,
        8,
        100,
        104,
        n / 10,
        n / 4,
        n / 2,
        3 * n / 4,
        9 * n / 10,
        n - 1,
    ] {
        cases.push((format!("truncated to {cut} bytes"), good[..cut].to_vec()));
    }
    for _ in 0..16 {
        let at = next() as usize % n;
        let bit = next() % 8;
        let mut b = good.clone();
        b[at] ^= 1 << bit;
        cases.push((format!("bit {bit} of byte {at} flipped"), b));
    }
    // The file header and its first section descriptors, then anywhere.
    for (i, len) in [(0, 16), (16, 64), (104, 64)] {
        let mut b = good.clone();
        b[i..i + len].fill(0);
        cases.push((format!("bytes {i}..{} zeroed", i + len), b));
    }
    for _ in 0..10 {
        let at = next() as usize % n;
        let end = (at + 1 + next() as usize % 8192).min(n);
        let mut b = good.clone();
        b[at..end].fill(0);
        cases.push((format!("bytes {at}..{end} zeroed"), b));
    }
    let mut traces = 0;
    let mut errors = 0;
    let mut messages = std::collections::BTreeSet::new();
    let mut problems = Vec::new();
    let mut disagreements = 0;
    for (i, (what, bytes)) in cases.iter().enumerate() {
        let file = dir.join(format!("damaged-{i}.data"));
        std::fs::write(&file, bytes).expect("write damaged file");
        let mut outcomes = Vec::new();
        for choice in [Choice::Text, Choice::Dlfilter] {
            match catch_unwind(AssertUnwindSafe(|| decode(&file, &perf, choice))) {
                Ok(o) => outcomes.push(o),
                Err(_) => {
                    problems.push(format!("{what}: {choice:?} panicked"));
                    continue;
                }
            }
        }
        for o in &outcomes {
            match o {
                Outcome::Events(_, end) => {
                    traces += 1;
                    if let Some(e) = end {
                        messages.insert(e.lines().next().unwrap_or("").to_string());
                    }
                }
                Outcome::Failed(e) => {
                    errors += 1;
                    messages.insert(e.lines().next().unwrap_or("").to_string());
                    // A person can act on it: it says what failed, in words.
                    if e.trim().len() < 15 || e.contains("no events and no error") {
                        problems.push(format!("{what}: unclear error {e:?}"));
                    }
                }
            }
        }
        // Both paths decoding the same damage alike is not required: perf resolves a
        // damaged recording's addresses differently for `perf script` printing and for
        // the dlfilter API (a misnamed kernel map, a lost pid), so they are only
        // reported. Undamaged recordings must agree (equivalence.rs).
        if let [Outcome::Events(t, _), Outcome::Events(d, _)] = &outcomes[..] {
            let k = t.len().min(d.len());
            if let Some(j) = (0..k).find(|&j| t[j] != d[j]) {
                disagreements += 1;
                eprintln!(
                    "{what}: the paths differ from event {j} of {}/{}:\n  text:     {:?}\n  dlfilter: {:?}",
                    t.len(),
                    d.len(),
                    t[j],
                    d[j]
                );
            }
        }
        std::fs::remove_file(&file).expect("remove damaged file");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    eprintln!(
        "{} damaged files: {traces} traces and {errors} clear errors over both paths, \
         {disagreements} decoded differently by the two paths; messages:\n{}",
        cases.len(),
        messages.into_iter().collect::<Vec<_>>().join("\n")
    );
    // Both kinds of outcome were reached, so the damage was not all harmless.
    assert!(
        traces > 10 && errors > 5,
        "{traces} traces, {errors} errors"
    );
}
