//! Both stack writers, driven to FXT the way `ptscope decode` drives them, close every
//! slice they open on every input: a real system-wide sampling recording, a thread with
//! a single sample, and hundreds of mutated inputs. The checker must pass on each.

use ptscope_decode::perf::RecordingKind;
use ptscope_decode::Decoder;
use ptscope_event::{
    Event, EventData, Kind, Location, OcamlExceptionInfo, StringTable, Symbol, Thread, TraceScope,
    TraceStateChange,
};
use ptscope_fxt::check::{validate_bytes, Report};
use ptscope_output::FxtSink;
use ptscope_stacks::legacy::LegacyWriter;
use ptscope_stacks::ordered::OrderedSink;
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::{StackWriter, WriterConfig};
use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};

/// Every event `perf script` text holds, and their names.
fn decode(text: &[u8]) -> (Vec<Event>, StringTable) {
    let mut decoder = Decoder::new(text);
    let mut events = Vec::new();
    // A decode error ends the input, as it ends what the CLI reads.
    while let Ok(Some(e)) = decoder.next_event() {
        events.push(e);
    }
    (events, decoder.into_strings())
}

fn events_to_fxt(
    events: &[Event],
    strings: &StringTable,
    legacy: bool,
    snapshots: &[usize],
    config: &WriterConfig,
) -> Result<Vec<u8>, String> {
    let earliest_time = events.iter().find_map(|e| e.time()).unwrap_or(0);
    let config = WriterConfig {
        earliest_time,
        ..config.clone()
    };
    if legacy {
        let w = LegacyWriter::new(OrderedSink::new(FxtSink::new(Vec::new())), config);
        let ordered = run(w, events, strings, snapshots);
        let (fxt, stats) = ordered.finish_with_stats().expect("in-memory spool");
        // The ordering sink ends what the writer left open; the writer itself must not.
        if stats.closed_at_finish > 0 {
            return Err(format!(
                "the writer left {} slices open: {stats:?}",
                stats.closed_at_finish
            ));
        }
        Ok(fxt.finish().expect("writing to a Vec"))
    } else {
        let w = SegmentsWriter::new(FxtSink::new(Vec::new()), config);
        Ok(run(w, events, strings, snapshots)
            .finish()
            .expect("writing to a Vec"))
    }
}

fn run<S: ptscope_stacks::TraceSink, W: StackWriter<S>>(
    mut w: W,
    events: &[Event],
    strings: &StringTable,
    snapshots: &[usize],
) -> S {
    for (i, e) in events.iter().enumerate() {
        if snapshots.contains(&i) {
            w.end_snapshot(strings);
        }
        w.write_event(e, strings);
    }
    w.finish(strings)
}

/// Checks the traces of `events` from both writers: valid, and begins == ends per thread.
fn check_both(
    label: &str,
    events: &[Event],
    strings: &StringTable,
    snapshots: &[usize],
    config: &WriterConfig,
) -> Result<(), String> {
    for legacy in [true, false] {
        let writer = if legacy { "legacy" } else { "segments" };
        let bytes = events_to_fxt(events, strings, legacy, snapshots, config)
            .map_err(|e| format!("{label} ({writer}): {e}"))?;
        let report = validate_bytes(&bytes);
        balanced(&report).map_err(|e| format!("{label} ({writer}): {e}"))?;
    }
    Ok(())
}

fn balanced(report: &Report) -> Result<(), String> {
    if !report.is_ok() {
        return Err(format!("checker: {report}"));
    }
    for (thread, t) in &report.threads {
        if t.begins != t.ends {
            return Err(format!(
                "thread {thread:?}: {} begins, {} ends",
                t.begins, t.ends
            ));
        }
    }
    Ok(())
}

/// Records the whole machine for a second while real programs (gzip, python3) run and
/// returns the `perf script` text the CLI would read, or `None` (a loud skip outside CI)
/// when perf cannot record system-wide here.
fn record_system_wide(dir: &Path) -> Option<Vec<u8>> {
    let data = dir.join("perf.data");
    let workload = "gzip -c /usr/bin/perf > /dev/null; \
                    python3 -c 'import json; json.dumps([list(range(200)) for _ in range(3000)])'; \
                    sleep 0.3";
    let rec = Command::new("perf")
        .args(["record", "-q", "-a", "-g", "-e", "cpu-clock", "-o"])
        .arg(&data)
        .args(["--", "sh", "-c", workload])
        .stdout(Stdio::null())
        .output();
    let why = match rec {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "perf record -a failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => Some(format!("perf not found ({e})")),
    };
    if let Some(why) = why {
        assert!(
            std::env::var_os("CI").is_none(),
            "perf unusable in CI: {why}"
        );
        eprintln!("!!!!!!!! SKIPPED the system-wide recording test: {why}");
        return None;
    }
    let script = Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(&data)
        .args(RecordingKind::Sampling.script_args())
        .stderr(Stdio::null())
        .output()
        .expect("perf script");
    assert!(script.status.success(), "perf script failed");
    Some(script.stdout)
}

#[test]
fn a_real_system_wide_recording_closes_every_slice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(text) = record_system_wide(dir.path()) else {
        return;
    };
    let (events, strings) = decode(&text);
    assert!(events.len() > 100, "only {} samples", events.len());
    let threads: HashSet<Thread> = events.iter().map(|e| e.thread()).collect();
    assert!(threads.len() > 3, "only {} threads", threads.len());
    let config = WriterConfig::default();
    check_both("perf record -a -g", &events, &strings, &[], &config).unwrap();
    // The same recording cut into snapshots, as several perf.data files are decoded.
    let cuts = [events.len() / 3, 2 * events.len() / 3];
    check_both(
        "perf record -a -g, 3 snapshots",
        &events,
        &strings,
        &cuts,
        &config,
    )
    .unwrap();
}

/// One `perf script` sample group: `frames` are leaf first, as perf prints them.
fn sample(pid: u32, time_ns: u64, frames: &[(&str, u64)]) -> String {
    let mut s = format!(
        "{pid}/{pid} {}.{:09}: 250000 cpu-clock:\n",
        time_ns / 1_000_000_000,
        time_ns % 1_000_000_000
    );
    for (name, ip) in frames {
        s.push_str(&format!("\t{ip:x} {name}+0x0 (/usr/bin/x)\n"));
    }
    s.push('\n');
    s
}

#[test]
fn a_thread_with_one_sample_closes_its_slices() {
    let stack = [("leaf", 0x1030), ("mid", 0x1020), ("main", 0x1010)];
    let other = [("work", 0x2020), ("main", 0x2010)];
    let config = WriterConfig::default();
    // The lone sample first (trace time 0), in the middle, and last.
    let cases = [
        sample(7, 1_000, &stack) + &sample(8, 2_000, &other) + &sample(8, 3_000, &other),
        sample(8, 1_000, &other) + &sample(7, 2_000, &stack) + &sample(8, 3_000, &other),
        sample(8, 1_000, &other) + &sample(8, 2_000, &other) + &sample(7, 3_000, &stack),
        sample(7, 1_000, &stack),
    ];
    for (i, text) in cases.iter().enumerate() {
        let (events, strings) = decode(text.as_bytes());
        assert!(!events.is_empty());
        let label = format!("case {i}");
        check_both(&label, &events, &strings, &[], &config).unwrap();
        check_both(&label, &events, &strings, &[1], &config).unwrap();
        // And the slices are there, not dropped to balance the books.
        for legacy in [true, false] {
            let bytes = events_to_fxt(&events, &strings, legacy, &[], &config).unwrap();
            let report = validate_bytes(&bytes);
            assert!(
                report.count("leaf") > 0,
                "{label} legacy={legacy}: {report}"
            );
        }
    }
}

#[path = "../../../tests/xorshift.rs"]
mod xorshift;
use xorshift::Rng;

fn fixtures() -> Vec<(String, Vec<String>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/magic-trace");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("fixtures") {
        let path = entry.expect("entry").path().join("input.perf");
        if let Ok(text) = std::fs::read_to_string(&path) {
            let name = path.parent().and_then(|p| p.file_name()).expect("name");
            let lines = text.lines().map(str::to_string).collect();
            out.push((name.to_string_lossy().into_owned(), lines));
        }
    }
    out.sort();
    assert!(out.len() >= 9, "the magic-trace fixtures are missing");
    out
}

/// Rewrites the `SECONDS.NANOS:` timestamp of a header line, if it has one.
fn set_time(line: &str, rng: &mut Rng) -> String {
    let Some(colon) = line.find(": ") else {
        return line.to_string();
    };
    let Some(start) = line[..colon].rfind(' ') else {
        return line.to_string();
    };
    let old = &line[start + 1..colon];
    let Some((secs, nanos)) = old.split_once('.') else {
        return line.to_string();
    };
    let (Ok(secs), Ok(nanos)) = (secs.parse::<u64>(), nanos.parse::<u64>()) else {
        return line.to_string();
    };
    let t = secs * 1_000_000_000 + nanos;
    let t = match rng.below(4) {
        0 => t.saturating_sub(rng.next() % 5_000),
        1 => t + rng.next() % 5_000,
        2 => t.saturating_sub(1),
        _ => rng.next() % (t + 1),
    };
    format!(
        "{}{}.{:09}{}",
        &line[..start + 1],
        t / 1_000_000_000,
        t % 1_000_000_000,
        &line[colon..]
    )
}

/// One random edit of `perf script` text, as a damaged or oddly ordered recording has.
fn mutate_lines(lines: &mut Vec<String>, rng: &mut Rng) {
    if lines.is_empty() {
        return;
    }
    let i = rng.below(lines.len());
    match rng.below(9) {
        0 => {
            lines.remove(i);
        }
        1 => {
            let l = lines[i].clone();
            lines.insert(i, l);
        }
        2 => {
            let j = rng.below(lines.len());
            lines.swap(i, j);
        }
        3 | 4 => lines[i] = set_time(&lines[i], rng),
        5 => {
            // Another thread: pid/tid are the line's first field.
            let l = &lines[i];
            if let Some(slash) = l.find('/') {
                let pid = 1 + rng.below(4);
                let rest = l[slash..].split_once(' ').map_or("", |(_, r)| r);
                lines[i] = format!("{pid}/{pid} {rest}");
            }
        }
        6 => {
            let cut = rng.below(lines[i].len() + 1);
            let cut = (0..=cut)
                .rev()
                .find(|&c| lines[i].is_char_boundary(c))
                .unwrap_or(0);
            lines[i].truncate(cut);
        }
        7 => {
            let j = rng.below(lines.len());
            let l = lines[j].clone();
            lines.insert(i, l);
        }
        _ => {
            let n = rng.below(20).min(lines.len() - i);
            lines.drain(i..i + n);
        }
    }
}

fn random_config(rng: &mut Rng, events: &[Event], strings: &StringTable) -> WriterConfig {
    let scope = match rng.below(3) {
        0 => TraceScope::Userspace,
        1 => TraceScope::UserspaceAndKernel,
        _ => TraceScope::Kernel,
    };
    // Exact OCaml exception mode with traps at addresses the input really branches to.
    let ips: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Ok {
                data: EventData::Trace { dst, .. },
                ..
            } => Some(strings.location(*dst).ip),
            _ => None,
        })
        .collect();
    let ocaml_exception_info = (rng.chance(25) && !ips.is_empty()).then(|| {
        let mut pick = || ips[rng.below(ips.len())];
        OcamlExceptionInfo::new(&[pick(), pick()], &[pick(), pick()], &[pick()])
    });
    WriterConfig {
        scope,
        ocaml_exception_info,
        ..WriterConfig::default()
    }
}

fn random_snapshots(rng: &mut Rng, n: usize) -> Vec<usize> {
    if n == 0 || rng.chance(60) {
        return Vec::new();
    }
    (0..1 + rng.below(3)).map(|_| rng.below(n)).collect()
}

#[test]
fn mutated_fixture_texts_close_every_slice() {
    let fixtures = fixtures();
    let mut rng = Rng(0x005e_ed0f_f1c7_u64);
    let mut failures = Vec::new();
    let runs = 320;
    for run in 0..runs {
        let (name, lines) = &fixtures[run % fixtures.len()];
        // A window of the big fixtures: starting mid-stack is part of the test.
        let start = if lines.len() > 400 {
            rng.below(lines.len() - 300)
        } else {
            0
        };
        let mut lines: Vec<String> = lines[start..].iter().take(300).cloned().collect();
        for _ in 0..1 + rng.below(12) {
            mutate_lines(&mut lines, &mut rng);
        }
        let text = lines.join("\n") + "\n";
        let (events, strings) = decode(text.as_bytes());
        let config = random_config(&mut rng, &events, &strings);
        let snapshots = random_snapshots(&mut rng, events.len());
        let label = format!("run {run} ({name} from line {start})");
        if let Err(e) = check_both(&label, &events, &strings, &snapshots, &config) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} mutated inputs gave a bad trace; the first:\n{}",
        failures.len(),
        failures[..failures.len().min(3)].join("\n")
    );
}

/// A random but plausible event stream: branches of every kind and trace-state change,
/// stack samples, decode errors, TSX, on a few threads, time mostly moving forward.
fn random_events(rng: &mut Rng, strings: &mut StringTable) -> Vec<Event> {
    let names = [
        "main",
        "f",
        "g",
        "h",
        "caml_raise_exn",
        "gogo",
        "runtime.mcall",
        "k",
    ];
    let syms: Vec<Symbol> = names
        .iter()
        .map(|n| Symbol::FromPerf(strings.intern(n)))
        .collect();
    let message = strings.intern("Overflow packet");
    let loc = |rng: &mut Rng| {
        let i = rng.below(syms.len());
        let kernel = rng.chance(10);
        let base = if kernel {
            0xffff_ffff_8100_0000
        } else {
            0x40_0000
        };
        Location::new(base + i as u64 * 0x100 + rng.below(3) as u64, syms[i], 0)
    };
    let kinds = [
        Kind::Async,
        Kind::Call,
        Kind::Return,
        Kind::Syscall,
        Kind::Sysret,
        Kind::HardwareInterrupt,
        Kind::Interrupt,
        Kind::Iret,
        Kind::Jump,
        Kind::TxAbort,
    ];
    let mut time = 1_000_000u64 + rng.below(1000) as u64;
    let mut out = Vec::new();
    for _ in 0..rng.below(200) + 1 {
        time = match rng.below(20) {
            0 => time.saturating_sub(rng.below(50) as u64),
            1..=8 => time,
            _ => time + rng.below(30) as u64,
        };
        let tid = 1 + rng.below(3) as u32;
        let thread = Thread {
            pid: Some(tid),
            tid: Some(tid),
        };
        if rng.chance(3) {
            out.push(Event::DecodeError {
                thread,
                time: rng.chance(70).then_some(time),
                ip: rng.chance(50).then(|| loc(rng).ip),
                message,
            });
            continue;
        }
        let data = if rng.chance(15) {
            let depth = rng.below(6);
            EventData::StackSample {
                callstack: strings.intern_stack((0..depth).map(|_| loc(rng)).collect::<Vec<_>>()),
            }
        } else {
            // Calls and returns dominate, as in a real trace.
            let kind = match rng.below(10) {
                0..=3 => Some(Kind::Call),
                4..=6 => Some(Kind::Return),
                _ if rng.chance(5) => None,
                _ => Some(kinds[rng.below(kinds.len())]),
            };
            let change = match rng.below(12) {
                0 => Some(TraceStateChange::Start),
                1 => Some(TraceStateChange::End),
                _ => None,
            };
            EventData::Trace {
                change,
                kind,
                src: strings.intern_location(loc(rng)),
                dst: strings.intern_location(loc(rng)),
            }
        };
        out.push(Event::Ok {
            thread,
            time,
            data,
            in_transaction: rng.chance(3),
        });
    }
    out
}

#[test]
fn random_event_streams_close_every_slice() {
    let mut rng = Rng(0x00c0_ffee_d00d_u64);
    let mut failures = Vec::new();
    let runs = 400;
    for run in 0..runs {
        let mut strings = StringTable::new();
        let events = random_events(&mut rng, &mut strings);
        let config = random_config(&mut rng, &events, &strings);
        let snapshots = random_snapshots(&mut rng, events.len());
        if let Err(e) = check_both(
            &format!("run {run}"),
            &events,
            &strings,
            &snapshots,
            &config,
        ) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} random event streams gave a bad trace; the first:\n{}",
        failures.len(),
        failures[..failures.len().min(3)].join("\n")
    );
}
