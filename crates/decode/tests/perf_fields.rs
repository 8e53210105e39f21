//! `perf script` output in the field sets people actually run it with: a real
//! `perf record -g` of python3, printed by real `perf script` in its default layout, with
//! `--ns`, with `-F` lists without `symoff`, `dso` or `event`, and with task events,
//! must give the same stacks as ptscope's own field set; a field set that cannot make a
//! trace must name the missing field.

use ptscope_decode::{Decoder, MissingField, RecordingKind};
use ptscope_event::{Event, EventData, Symbol};
use std::path::Path;
use std::process::Command;

fn have(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Skips (returns false) when a tool is missing, except under CI where it must exist.
fn require_tools() -> bool {
    let missing: Vec<&str> = [("perf", "--version"), ("/usr/bin/python3", "--version")]
        .into_iter()
        .filter(|(p, a)| !have(p, a))
        .map(|(p, _)| p)
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but {missing:?} is missing"
    );
    eprintln!("skipping: {missing:?} not installed");
    false
}

/// Records python3 summing squares (~0.3 s of CPU): its interpreter has symbols.
fn record(dir: &Path) -> Option<std::path::PathBuf> {
    let out = dir.join("perf.data");
    let status = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-g", "-o"])
        .arg(&out)
        .args([
            "--",
            "/usr/bin/python3",
            "-c",
            "print(sum(i * i for i in range(1500000)))",
        ])
        .output()
        .expect("spawn perf record");
    if !status.status.success() {
        assert!(
            std::env::var_os("CI").is_none(),
            "perf record failed under CI: {}",
            String::from_utf8_lossy(&status.stderr)
        );
        eprintln!(
            "skipping: perf record failed: {}",
            String::from_utf8_lossy(&status.stderr)
        );
        return None;
    }
    Some(out)
}

fn script(data: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(data)
        .args(args)
        .output()
        .expect("spawn perf script");
    assert!(
        out.status.success(),
        "perf script {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// One sample as comparable across field sets: tid, time in µs, named frames.
type Sample = (Option<u32>, u64, Vec<String>);

struct Decoded {
    samples: Vec<Sample>,
    /// (tid, pid, name) of every thread-name event.
    comms: Vec<(Option<u32>, Option<u32>, String)>,
    pids: Vec<Option<u32>>,
    missing: Vec<MissingField>,
    warnings: u64,
}

fn decode(text: &[u8]) -> Decoded {
    let mut d = Decoder::new(text);
    let mut samples = Vec::new();
    let mut comms = Vec::new();
    let mut pids = Vec::new();
    while let Some(e) = d.next_event().expect("decode") {
        let Event::Ok {
            thread, time, data, ..
        } = e
        else {
            continue;
        };
        match data {
            EventData::StackSample { callstack } => {
                let names = (d.strings().stack(callstack))
                    .filter_map(|l| match l.symbol {
                        Symbol::FromPerf(n) => Some(d.strings().get(n).to_owned()),
                        _ => None,
                    })
                    // perf names unresolved frames differently with and without `dso`.
                    .filter(|n| !n.starts_with("[unknown"))
                    .collect();
                pids.push(thread.pid);
                samples.push((thread.tid, time / 1000, names));
            }
            EventData::Comm { name, .. } => {
                comms.push((thread.tid, thread.pid, d.strings().get(name).to_owned()))
            }
            _ => {}
        }
    }
    Decoded {
        samples,
        comms,
        pids,
        missing: d.missing_fields().to_vec(),
        warnings: d.stats().warnings,
    }
}

#[test]
fn every_usable_field_set_gives_the_same_stacks() {
    if !require_tools() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(data) = record(dir.path()) else {
        return;
    };
    let reference = decode(&script(&data, RecordingKind::Sampling.script_args()));
    assert!(reference.samples.len() > 20, "too few samples to compare");
    assert!(
        reference
            .samples
            .iter()
            .any(|s| s.2.iter().any(|n| n == "_PyEval_EvalFrameDefault")),
        "python's interpreter loop is not in the reference stacks"
    );
    for args in [
        &[][..],
        &["--ns"],
        &["--show-task-events"],
        &["-F", "comm,tid,time,ip,sym"],
        &["-F", "comm,tid,time,ip,sym,dso"],
        &["-F", "pid,tid,time,ip,sym,dso,event,period"],
        &["-F", "tid,time,event,ip,sym,symoff"],
        &["-F", "comm,pid,tid,time,period,ip,sym,symoff,dso", "--ns"],
    ] {
        let got = decode(&script(&data, args));
        assert_eq!(got.warnings, 0, "perf script {args:?}: warnings");
        assert_eq!(
            got.missing,
            [],
            "perf script {args:?}: fields reported missing"
        );
        assert_eq!(
            got.samples.len(),
            reference.samples.len(),
            "perf script {args:?}: sample count"
        );
        for (g, r) in got.samples.iter().zip(&reference.samples) {
            assert_eq!(g, r, "perf script {args:?}: a sample differs");
        }
        let fields = args.join(" ");
        if fields.contains("comm") || !fields.contains("-F") {
            // The comm column names the thread even without task events.
            assert!(
                got.comms.iter().any(|c| c.2 == "python3"),
                "perf script {args:?}: python's thread is not named: {:?}",
                got.comms
            );
        }
        if args.contains(&"--show-task-events") {
            // The tid alone is printed; the pid comes from the task events.
            assert_eq!(
                got.pids, reference.pids,
                "perf script {args:?}: pids not learned from task events"
            );
        }
    }
}

#[test]
fn a_field_set_that_cannot_make_a_trace_names_the_missing_field() {
    if !require_tools() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(data) = record(dir.path()) else {
        return;
    };
    for (fields, want, samples) in [
        ("comm,tid,ip,sym", &[MissingField::Time][..], false),
        ("comm,time,ip,sym", &[MissingField::Tid], false),
        ("ip,sym", &[MissingField::Time, MissingField::Tid], false),
        ("tid,time,sym", &[MissingField::Ip], true),
        ("tid,time,ip", &[MissingField::Sym], true),
    ] {
        let got = decode(&script(&data, &["-F", fields]));
        assert_eq!(got.missing, want, "-F {fields}");
        assert_eq!(!got.samples.is_empty(), samples, "-F {fields}: samples");
        let message = got.missing[0].to_string();
        assert!(
            message.contains(&format!("no `{}` field", want[0].field()))
                && message.contains(&format!("-F +{}", want[0].field())),
            "-F {fields}: {message}"
        );
    }
}

/// Intel PT branches printed without `flags` (no `call`/`return`/`jmp` words; perf's
/// layout, as in magic-trace's fixtures, minus that column): named, not guessed at.
#[test]
fn pt_branches_without_flags_name_the_field() {
    let mut text = String::new();
    for i in 0..300u64 {
        text.push_str(&format!(
            "ls 1234 [001] 10.{:09}:          1 branches:u:      7f{:04x} a+0x{:x} (/lib/x.so) =>     7f9000 b+0x0 (/lib/x.so)\n",
            i * 100,
            i,
            i
        ));
    }
    let got = decode(text.as_bytes());
    assert_eq!(got.warnings, 0);
    assert_eq!(got.missing, [MissingField::Flags]);
    let message = MissingField::Flags.to_string();
    assert!(message.contains("no `flags` field") && message.contains("--itrace=bep"));
    // With the flags, nothing is reported.
    let with = text.replace("branches:u:      7f", "branches:u:   call   7f");
    assert_eq!(decode(with.as_bytes()).missing, []);
}
