//! End-to-end tests of `ptscope decode`: the real binary on real fixture files.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn ptscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ptscope"))
}

#[path = "../../../tests/fixtures_dir.rs"]
mod fixture_dir;

fn fixtures() -> PathBuf {
    fixture_dir::fixtures_dir().join("magic-trace")
}

/// A private temporary directory, removed when dropped (also when the test fails).
fn tmpdir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("ptscope-cli-{name}-"))
        .tempdir()
        .expect("temporary directory")
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
    let tmp = tmpdir("empty");
    let d = tmp.path();
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
}

#[test]
fn binary_garbage_fails_with_examples_of_what_was_wrong() {
    let tmp = tmpdir("garbage");
    let d = tmp.path();
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
}

/// A truncated file and lines from an unknown perf still give a trace with everything
/// that could be read, a warning, and exit code 0.
#[test]
fn truncated_and_unknown_lines_keep_what_was_decoded() {
    let tmp = tmpdir("partial");
    let d = tmp.path();
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
}

/// `--filter START,STOP` keeps what happens from a call to START until the call to
/// STOP, for both writers; the stack inside the range is complete (open frames are
/// reopened at its start), and nothing from outside it is written.
#[test]
fn filter_keeps_only_the_range() {
    let input = fixtures().join("hello_world_userspace/input.perf");
    for writer in ["segments", "legacy"] {
        let all = run(ptscope()
            .args([
                "decode",
                "--quiet",
                "--format",
                "transcript",
                "-o",
                "-",
                "--writer",
                writer,
            ])
            .arg("--perf-script")
            .arg(&input));
        let out = run(ptscope()
            .args([
                "decode",
                "--quiet",
                "--format",
                "transcript",
                "-o",
                "-",
                "--writer",
                writer,
            ])
            .args(["--filter", "dl_main,_dl_init", "--perf-script"])
            .arg(&input));
        assert!(out.status.success(), "{}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        let all = String::from_utf8_lossy(&all.stdout);
        let begins = |t: &str, name: &str| {
            t.lines()
                .filter(|l| l.contains(" BEGIN ") && l.trim_end().ends_with(name))
                .count()
        };
        assert!(begins(&text, " dl_main") >= 1, "{writer}: {text}");
        // main, fwrite and exit run after _dl_init is called: outside the range.
        for outside in [" main", " fwrite", " exit", " _dl_init"] {
            assert!(
                begins(&all, outside) >= 1,
                "{writer}: {outside} in the full trace"
            );
            assert_eq!(
                begins(&text, outside),
                0,
                "{writer}: {outside} is outside the range"
            );
        }
        let kept = text.lines().filter(|l| l.contains(" BEGIN ")).count();
        let total = all.lines().filter(|l| l.contains(" BEGIN ")).count();
        assert!(
            kept > 100 && kept < total,
            "{writer}: kept {kept} of {total}"
        );
    }
    let bad = run(ptscope()
        .args(["decode", "--filter", "only_one", "--perf-script"])
        .arg(&input));
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("START,STOP"), "{}", stderr(&bad));
}

/// Issue 25's minimal input, through the command the issue names (`ptscope decode
/// --perf-script unwind.perf --format transcript`, default writer): a `jmp` from `d`
/// into `a`'s body ends `b`, `c` and `d` and begins no second `a`; a `return` from `d`
/// straight to `main` ends everything above `main`. The same golden file is checked
/// through the library, with variants (gaps, snapshots), in
/// `crates/stacks/tests/segments_unwinds.rs`.
#[test]
fn a_jump_into_an_ancestor_unwinds_to_it_through_the_cli() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../stacks/tests/data");
    let out = run(ptscope()
        .args(["decode", "--quiet", "--format", "transcript", "-o", "-"])
        .arg("--perf-script")
        .arg(data.join("unwind_into_ancestor.perf")));
    assert!(out.status.success(), "{}", stderr(&out));
    let expected =
        std::fs::read_to_string(data.join("unwind_into_ancestor.expected.txt")).expect("golden");
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
}

/// By default (issue 25), a burst where the trace cannot say whether `m` returned in
/// the first gap or the second (the input of `segments_unwinds::frames_a_burst_does_not_
/// prove_give_way_to_the_marker_frame`) shows the marker frame in `m`'s place under the
/// short segment, as `--mark-unknown-frames` (still accepted) did; with
/// `--guess-unknown-frames` `m` is carried, as the default did before.
#[test]
fn the_marker_frame_stands_by_default_where_a_burst_proves_nothing() {
    let input = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../stacks/tests/data/burst_unproven_frames.perf");
    let decode = |flags: &[&str]| {
        let mut cmd = ptscope();
        cmd.args(["decode", "--quiet", "--format", "transcript", "-o", "-"])
            .args(flags)
            .arg("--perf-script")
            .arg(&input);
        let out = run(&mut cmd);
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    const MARKER: &str = "[unknown frames lost in decode error]";
    let carried = decode(&["--guess-unknown-frames"]);
    assert!(
        !carried.contains(MARKER),
        "no marker when guessing:\n{carried}"
    );
    // A transcript line without its ` [inferred start time]` note.
    let bare = |l: &str| l.trim_end_matches(" [inferred start time]").to_string();
    let lines = |t: &str, name: &str| t.lines().filter(|l| bare(l).ends_with(name)).count();
    assert_eq!(lines(&carried, "BEGIN m"), 1, "{carried}");
    let marked = decode(&[]);
    assert_eq!(
        decode(&["--mark-unknown-frames"]),
        marked,
        "the old flag is the default"
    );
    assert_eq!(lines(&marked, &format!("BEGIN {MARKER}")), 1, "{marked}");
    assert_eq!(lines(&marked, &format!("END   {MARKER}")), 1, "{marked}");
    // The marker begins where `m` ends, and both `f` and `g` run on it.
    let at = |t: &str, what: &str| {
        t.lines()
            .position(|l| bare(l).ends_with(what))
            .unwrap_or_else(|| panic!("no {what:?} in\n{t}"))
    };
    assert!(
        at(&marked, "END   m") < at(&marked, &format!("BEGIN {MARKER}")),
        "{marked}"
    );
    assert!(
        at(&marked, &format!("BEGIN {MARKER}")) < at(&marked, "BEGIN f"),
        "{marked}"
    );
    assert!(
        at(&marked, "END   f") < at(&marked, &format!("END   {MARKER}")),
        "{marked}"
    );
}
