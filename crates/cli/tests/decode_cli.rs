//! End-to-end tests of `ptscope decode`: the real binary on real fixture files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn ptscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ptscope"))
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/magic-trace")
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ptscope-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmpdir");
    d
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run ptscope")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every fixture through the CLI's transcript output equals magic-trace's expected.txt.
#[test]
fn transcript_matches_magic_trace_for_every_fixture() {
    let mut checked = 0;
    for entry in std::fs::read_dir(fixtures()).expect("fixtures") {
        let case = entry.expect("entry").path();
        if !case.join("expected.txt").exists() {
            continue;
        }
        let case_toml = std::fs::read_to_string(case.join("case.toml")).expect("case.toml");
        let mut cmd = ptscope();
        cmd.args([
            "decode",
            "--writer",
            "legacy",
            "--format",
            "transcript",
            "-o",
            "-",
            "--quiet",
        ])
        .arg("--perf-script")
        .arg(case.join("input.perf"));
        if case_toml.contains("[ocaml_exception_info]") {
            cmd.arg("--ocaml-exception-info")
                .arg(case.join("case.toml"));
        }
        let scope = case_toml
            .lines()
            .find_map(|l| l.strip_prefix("trace_scope = "))
            .map(|s| s.trim_matches('"').to_string())
            .expect("trace_scope");
        cmd.args(["--scope", &scope]);
        let out = run(&mut cmd);
        assert!(out.status.success(), "{}: {}", case.display(), stderr(&out));
        let expected = std::fs::read(case.join("expected.txt")).expect("expected.txt");
        assert!(
            out.stdout == expected,
            "{}: transcript differs from expected.txt",
            case.display()
        );
        checked += 1;
    }
    assert_eq!(checked, 9);
}

#[test]
fn missing_file_is_a_clear_error() {
    let out = run(ptscope().args(["decode", "--perf-script", "/nonexistent/x.perf"]));
    assert_eq!(out.status.code(), Some(1));
    let e = stderr(&out);
    assert!(
        e.contains("/nonexistent/x.perf") && e.contains("no such file"),
        "{e}"
    );
    let out = run(ptscope().args(["decode", "/nonexistent/perf.data"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no such file"), "{}", stderr(&out));
}

#[test]
fn empty_input_fails_and_leaves_nothing_behind() {
    let d = tmpdir("empty");
    let input = d.join("empty.perf");
    std::fs::write(&input, b"").expect("write");
    let trace = d.join("t.fxt.gz");
    let out = run(ptscope()
        .args(["decode", "--quiet", "--perf-script"])
        .arg(&input)
        .arg("-o")
        .arg(&trace));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no events were decoded"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("empty"), "{}", stderr(&out));
    assert!(!trace.exists(), "an empty trace was left behind");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn binary_garbage_fails_with_examples_of_what_was_wrong() {
    let d = tmpdir("garbage");
    let input = d.join("garbage.perf");
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let bytes: Vec<u8> = (0..100_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&input, bytes).expect("write");
    let trace = d.join("t.fxt");
    let out = run(ptscope()
        .args(["decode", "--quiet", "--perf-script"])
        .arg(&input)
        .arg("-o")
        .arg(&trace));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("not understood"), "{}", stderr(&out));
    assert!(!trace.exists());
    let _ = std::fs::remove_dir_all(d);
}

/// A truncated file and lines from an unknown perf still give a trace with everything
/// that could be read, a warning, and exit code 0.
#[test]
fn truncated_and_unknown_lines_keep_what_was_decoded() {
    let d = tmpdir("partial");
    let full = std::fs::read(fixtures().join("hello_world_userspace/input.perf")).expect("fixture");
    let mut text = full[..full.len() / 2].to_vec();
    // A line no perf we know prints, in the middle of the stream.
    let mid = text.len() / 2;
    let nl = mid
        + text[mid..]
            .iter()
            .position(|&b| b == b'\n')
            .expect("newline")
        + 1;
    text.splice(
        nl..nl,
        b"  1234/1234 1.000000000: 1 branches:uH: frobnicate 0 x => 1 y\n"
            .iter()
            .copied(),
    );
    let input = d.join("partial.perf");
    std::fs::write(&input, &text).expect("write");
    let trace = d.join("t.fxt");
    let out = run(ptscope()
        .args(["decode", "--quiet", "--perf-script"])
        .arg(&input)
        .arg("-o")
        .arg(&trace));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("not understood"), "{}", stderr(&out));
    let data = std::fs::read(&trace).expect("trace written");
    let report = ptscope_fxt::check::validate_bytes(&data);
    assert!(report.is_ok(), "{report:?}");
    assert!(report.events > 500, "{report:?}");
    let _ = std::fs::remove_dir_all(d);
}
