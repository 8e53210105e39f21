//! `ptscope report` on the three kinds of trace: Intel PT (magic-trace's real recording,
//! whose transcript says how many calls there are), sampled call stacks (counts marked
//! as estimates) and an emulate run of a program with known call counts (exact). Every
//! function's calls, total and self time are checked against a plain walk over the
//! trace's slices, in the text tables and in `--json` alike; flame graphs are valid SVG
//! naming the program's functions.

#[path = "common/emulate.rs"]
mod emulate;
#[path = "../../../tests/fixtures_dir.rs"]
mod fixtures_dir;

use ptscope_fxt::reader::{EventKind, Reader, Record};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// calls, total (outermost activations only), self, per function: computed the obvious
/// way, one stack of open slices per thread, as the truth the report must match.
type Truth = BTreeMap<String, (u64, u64, u64)>;

fn truth(trace: &Path) -> (Truth, u64) {
    let data = ptscope_output::read_trace_file(trace).unwrap();
    let mut info = None;
    // Per thread, the open slices: name, start, time in closed callees.
    type Open = Vec<(String, u64, u64)>;
    let mut stacks: BTreeMap<(u64, u64), Open> = BTreeMap::new();
    let mut t = Truth::new();
    let mut busy = 0;
    for r in Reader::new(&data) {
        match r.unwrap() {
            Record::KernelObject(k) if k.obj_type == 1 && k.name == "ptscope" => {
                info = Some(k.koid)
            }
            Record::Event(e) if Some(e.pid) != info => {
                let stack = stacks.entry((e.pid, e.tid)).or_default();
                match e.kind {
                    EventKind::Begin => stack.push((e.name.to_string(), e.timestamp, 0)),
                    // A leaf call is one complete event: a begin and its end.
                    EventKind::End | EventKind::Complete { .. } => {
                        let (name, start, child, end) = match e.kind {
                            EventKind::Complete { end } => {
                                (e.name.to_string(), e.timestamp, 0, end)
                            }
                            _ => match stack.pop() {
                                Some((name, start, child)) => (name, start, child, e.timestamp),
                                None => continue,
                            },
                        };
                        let dur = end - start;
                        let nested = stack.iter().any(|f| f.0 == name);
                        let row = t.entry(name).or_default();
                        row.0 += 1;
                        row.2 += dur - child;
                        if !nested {
                            row.1 += dur;
                        }
                        match stack.last_mut() {
                            Some(p) => p.2 += dur,
                            None => busy += dur,
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    assert!(stacks.values().all(Vec::is_empty), "every slice is closed");
    (t, busy)
}

fn ptscope(dir: &Path, args: &[&str]) -> (String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_ptscope"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(o.status.success(), "ptscope {args:?}: {err}");
    (out, err)
}

fn json(dir: &Path, trace: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["report", trace, "--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&ptscope(dir, &args).0).unwrap()
}

/// The report's all-threads rows, by name.
fn rows(j: &serde_json::Value) -> Truth {
    j["all_threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                (
                    f["calls"].as_u64().unwrap(),
                    f["total_ns"].as_u64().unwrap(),
                    f["self_ns"].as_u64().unwrap(),
                ),
            )
        })
        .collect()
}

/// The report agrees with the truth and with itself: JSON figures are the truth, self
/// times add up to the busy time, and the text tables print the same figures.
fn check(dir: &Path, trace: &str, exact: bool) -> (Truth, serde_json::Value, String) {
    let (want, busy) = truth(&dir.join(trace));
    let j = json(dir, trace, &["--top", "100000"]);
    assert_eq!(j["counts_exact"].as_bool(), Some(exact));
    let got = rows(&j);
    assert_eq!(got, want, "the report's figures are the slices'");
    let self_sum: u64 = got.values().map(|r| r.2).sum();
    let busy_json: u64 = j["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["busy_ns"].as_u64().unwrap())
        .sum();
    assert_eq!(
        self_sum, busy,
        "self times add up to the threads' busy time"
    );
    assert_eq!(busy_json, busy);
    let (text, _) = ptscope(dir, &["report", trace, "--top", "100000", "--slowest", "3"]);
    for line in text.lines() {
        assert!(
            line.chars().count() <= 80,
            "wider than 80 columns: {line:?}"
        );
    }
    // Each function's line on its thread's table shows the JSON's figures.
    let thread = &j["threads"][0];
    for f in thread["functions"].as_array().unwrap().iter().take(30) {
        let name = f["name"].as_str().unwrap();
        let calls = f["calls"].as_u64().unwrap();
        let calls = if exact {
            count(calls)
        } else {
            format!("~{}", count(calls))
        };
        let expect = format!(
            "{:>9}  {:>9}  {:>12}  {}",
            ptscope_report::text::duration(f["total_ns"].as_u64().unwrap()),
            ptscope_report::text::duration(f["self_ns"].as_u64().unwrap()),
            calls,
            ptscope_report::text::shorten(name, 44)
        );
        assert!(text.contains(&expect), "no line {expect:?} in\n{text}");
    }
    (want, j, text)
}

fn count(n: u64) -> String {
    ptscope_report::text::count(n)
}

/// `ptscope decode` of magic-trace's fixture `case` (its perf script text) to `out`.
fn decode_fixture(dir: &Path, case: &str, out: &str, extra: &[&str]) {
    let input = fixtures_dir::fixtures_dir().join(format!("magic-trace/{case}/input.perf"));
    let mut args = vec![
        "decode",
        "-q",
        "--perf-script",
        input.to_str().unwrap(),
        "-o",
        out,
    ];
    args.extend_from_slice(extra);
    ptscope(dir, &args);
}

#[test]
fn intel_pt_fixture_counts_are_the_transcripts() {
    let d = tempfile::tempdir().unwrap();
    let fx = fixtures_dir::fixtures_dir().join("magic-trace/hello_world_userspace");
    decode_fixture(
        d.path(),
        "hello_world_userspace",
        "pt.fxt.gz",
        &["--writer", "legacy"],
    );
    let (want, j, text) = check(d.path(), "pt.fxt.gz", true);
    // magic-trace's own transcript of this recording: one BEGIN per call.
    let mut begins: BTreeMap<String, u64> = BTreeMap::new();
    for l in std::fs::read_to_string(fx.join("expected.txt"))
        .unwrap()
        .lines()
    {
        if let Some((_, name)) = l.split_once(" BEGIN ") {
            let name = name.trim_end_matches(" [inferred start time]");
            *begins.entry(name.to_string()).or_default() += 1;
        }
    }
    let calls: BTreeMap<String, u64> = want.iter().map(|(k, v)| (k.clone(), v.0)).collect();
    assert_eq!(calls, begins);
    assert_eq!(j["source"], "exact");
    assert!(text.contains("counts and times are exact"), "{text}");
}

#[test]
fn sampled_trace_counts_are_marked_as_estimates() {
    let d = tempfile::tempdir().unwrap();
    decode_fixture(d.path(), "c_demo_sampling", "s.fxt.gz", &[]);
    let (_, j, text) = check(d.path(), "s.fxt.gz", false);
    assert_eq!(j["source"], "sampled");
    assert!(
        text.contains("counts (~)") && text.contains("estimates"),
        "{text}"
    );
}

const KNOWN: &str = r#"
#include <stdlib.h>
#include <stdio.h>
__attribute__((noinline)) int leaf(int x) { __asm__ volatile(""); return x * 3 + 1; }
__attribute__((noinline)) int mid(int x) { int s = 0; for (int i = 0; i < 3; i++) s += leaf(x + i); return s; }
__attribute__((noinline)) int top(int n) { int s = 0; for (int i = 0; i < n; i++) s += mid(i); return s; }
__attribute__((noinline)) int down(int k) { __asm__ volatile(""); return k ? down(k - 1) + 1 : 0; }
int main(void) {
    int s = top(200);
    for (int i = 0; i < 7; i++) s += down(4);
    printf("%d\n", s);
    return 0;
}
"#;

#[test]
fn emulate_run_of_known_calls_is_exact() {
    let Some(plugin) = emulate::plugin() else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    // No sibling-call optimisation: down() stays recursive.
    emulate::compile(d.path(), "known", KNOWN, &["-fno-optimize-sibling-calls"]);
    // `run --report` prints the report once the trace is written.
    let out = Command::new(emulate::ptscope())
        .env("PTSCOPE_EMULATE_PLUGIN", &plugin)
        .current_dir(d.path())
        .args([
            "run",
            "-q",
            "--backend",
            "emulate",
            "--report",
            "-o",
            "t.fxt.gz",
            "--",
            "./known",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ptscope report: t.fxt.gz"), "{stdout}");
    let (want, j, text) = check(d.path(), "t.fxt.gz", true);
    let calls = |f: &str| want.get(f).map(|r| r.0);
    assert_eq!(calls("main"), Some(1));
    assert_eq!(calls("top"), Some(1));
    assert_eq!(calls("mid"), Some(200));
    assert_eq!(calls("leaf"), Some(600));
    // 7 outermost calls, each going 4 deep: 35 calls; its total counts the 7.
    assert_eq!(calls("down"), Some(35));
    assert_eq!(j["source"], "emulate");
    assert!(text.contains("(emulated): counts are exact"), "{text}");

    // One function: its latency, callers and callees.
    let f = json(d.path(), "t.fxt.gz", &["--function", "mid"]);
    let f = &f["function"];
    assert_eq!(f["calls"], 200);
    assert_eq!(f["latency"]["count"], 200);
    assert_eq!(f["callers"][0]["name"], "top");
    assert_eq!(f["callers"][0]["calls"], 200);
    assert_eq!(f["callees"][0]["name"], "leaf");
    assert_eq!(f["callees"][0]["calls"], 600);
    let p50 = f["latency"]["percentiles_ns"]["p50"].as_u64().unwrap();
    assert!(f["latency"]["min_ns"].as_u64().unwrap() <= p50);
    assert!(p50 <= f["latency"]["max_ns"].as_u64().unwrap());
    let (text, _) = ptscope(d.path(), &["report", "t.fxt.gz", "--function", "mid"]);
    assert!(
        text.contains("Function mid") && text.contains("p99"),
        "{text}"
    );
    let by = text.split("called by").nth(1).unwrap();
    assert!(by.contains("top") && by.contains("200"), "{text}");
    // A part of a name is enough when it is unique; a wrong one lists candidates.
    let (text, _) = ptscope(d.path(), &["report", "t.fxt.gz", "--function", "dow"]);
    assert!(text.contains("Function down"), "{text}");
    let o = Command::new(emulate::ptscope())
        .current_dir(d.path())
        .args(["report", "t.fxt.gz", "--function", "nonesuch_function"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no function"));

    // Flame graphs: folded stacks with the call path, and a valid SVG naming them.
    let (folded, _) = ptscope(d.path(), &["report", "t.fxt.gz", "--folded", "-"]);
    let line = folded
        .lines()
        .find(|l| l.contains(";main;top;mid;leaf "))
        .unwrap_or_else(|| panic!("no main;top;mid;leaf stack in\n{folded}"));
    let ns: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(ns, want["leaf"].2, "leaf's self time is all under mid");
    let (per_thread, _) = ptscope(
        d.path(),
        &["report", "t.fxt.gz", "--folded", "-", "--per-thread"],
    );
    assert!(
        per_thread.lines().all(|l| l.starts_with("known [pid=")),
        "{per_thread}"
    );
    ptscope(
        d.path(),
        &["report", "-q", "t.fxt.gz", "--flamegraph", "f.svg"],
    );
    let svg = std::fs::read_to_string(d.path().join("f.svg")).unwrap();
    for f in ["main", "top", "mid", "leaf", "down"] {
        assert!(
            svg.contains(&format!(">{f}<")) || svg.contains(&format!("<title>{f} (")),
            "{f} not in the SVG"
        );
    }
    let parse = Command::new("python3")
        .args(["-c", "import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); assert d.documentElement.tagName == 'svg'"])
        .arg(d.path().join("f.svg"))
        .status()
        .unwrap();
    assert!(parse.success(), "the flame graph is not well-formed SVG");
}

#[test]
fn damaged_and_foreign_files_get_clear_answers() {
    let d = tempfile::tempdir().unwrap();
    let input = fixtures_dir::fixtures_dir().join("magic-trace/hello_world_userspace/input.perf");
    decode_fixture(d.path(), "hello_world_userspace", "t.fxt", &[]);
    let full = std::fs::read(d.path().join("t.fxt")).unwrap();
    std::fs::write(d.path().join("cut.fxt"), &full[..full.len() * 2 / 3]).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_ptscope"))
        .current_dir(d.path())
        .args(["report", "cut.fxt"])
        .output()
        .unwrap();
    // What came before the cut is reported, and the exit status says it was cut.
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("cut short") && out.contains("_start"), "{out}");
    let o = Command::new(env!("CARGO_BIN_EXE_ptscope"))
        .args(["report"])
        .arg(&input)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a trace ptscope can read"));
}

#[test]
fn a_trace_too_big_for_the_ui_is_said_to_be_and_report_is_pointed_to() {
    let d = tempfile::tempdir().unwrap();
    let input = fixtures_dir::fixtures_dir().join("magic-trace/hello_world_userspace/input.perf");
    let decode = |max: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_ptscope"))
            .current_dir(d.path())
            .env("PTSCOPE_UI_MAX_TRACE_BYTES", max)
            .args(["decode", "--perf-script"])
            .arg(&input)
            .args(["-o", "t.fxt.gz"])
            .output()
            .unwrap();
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    // The fixture's trace is some 60 KiB before compression.
    let err = decode("1000");
    assert!(
        err.contains("more than the Perfetto UI is likely to load"),
        "{err}"
    );
    assert!(err.contains("ptscope report t.fxt.gz"), "{err}");
    // What to write less of, on any backend: each named flag is one decode takes.
    for flag in ["--window START..END", "--min-duration 1us", "--max-depth N"] {
        assert!(err.contains(flag), "{flag}: {err}");
    }
    assert!(!decode("100000000").contains("likely to load"));
}
