//! Every fixture decoded to `.fxt.gz` is a valid trace for our own FXT checker and for
//! the independent PyPI `fxt` parser, and carries exactly the slices of the transcript.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[path = "../../../tests/fixtures_dir.rs"]
mod fixture_dir;

fn fixtures() -> PathBuf {
    fixture_dir::fixtures_dir().join("magic-trace")
}

/// The interpreter with PyPI `fxt`, or `None` (a loud skip) outside CI.
fn python_with_fxt() -> Option<PathBuf> {
    let py = std::env::var_os("PTSCOPE_FXT_PYTHON")
        .map(PathBuf::from)
        .or_else(|| Some(repo().join(".venv/bin/python")).filter(|p| p.exists()))
        .unwrap_or_else(|| PathBuf::from("python3"));
    let ok = Command::new(&py)
        .args(["-c", "import fxt"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(py);
    }
    let msg = format!(
        "{} cannot import the PyPI package fxt; run scripts/test",
        py.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("!!!!!!!! SKIPPED the python fxt cross-check: {msg}");
    None
}

fn slice_names_in_transcript(t: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for l in t.lines() {
        if let Some(i) = l.find(" BEGIN ") {
            let name = &l[i + 7..];
            let name = name.strip_suffix(" [inferred start time]").unwrap_or(name);
            *m.entry(name.to_string()).or_default() += 1;
        }
    }
    m
}

#[test]
fn fixtures_decode_to_valid_fxt() {
    let tmp = tempfile::Builder::new()
        .prefix("ptscope-fxt-fixtures-")
        .tempdir()
        .expect("temporary directory");
    let dir = tmp.path();
    let py = python_with_fxt();
    let mut n = 0;
    for writer in ["legacy", "segments"] {
        for entry in std::fs::read_dir(fixtures()).expect("fixtures") {
            let case = entry.expect("entry").path();
            if !case.join("expected.txt").exists() {
                continue;
            }
            let name = case
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            let toml = std::fs::read_to_string(case.join("case.toml")).expect("case.toml");
            let out = dir.join(format!("{name}.{writer}.fxt.gz"));
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptscope"));
            // Transcripts keep perf's names; compare like with like.
            cmd.args([
                "decode",
                "--quiet",
                "--no-demangle",
                "--writer",
                writer,
                "--perf-script",
            ])
            .arg(case.join("input.perf"))
            .arg("-o")
            .arg(&out);
            if toml.contains("[ocaml_exception_info]") {
                cmd.arg("--ocaml-exception-info")
                    .arg(case.join("case.toml"));
            }
            let o = cmd.output().expect("run");
            assert!(
                o.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&o.stderr)
            );

            let data = ptscope_output::read_trace_file(&out).expect("read back");
            let report = ptscope_fxt::check::validate_bytes(&data);
            assert!(report.is_ok(), "{name} ({writer}): {report}");

            // Names round-trip: every slice name of the writer's transcript is in the
            // trace, as often (more for legacy: the transcript omits extra-event slices).
            let t = Command::new(env!("CARGO_BIN_EXE_ptscope"))
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
                .arg(case.join("input.perf"))
                .args(if toml.contains("[ocaml_exception_info]") {
                    vec!["--ocaml-exception-info".into(), case.join("case.toml")]
                } else {
                    vec![]
                })
                .output()
                .expect("transcript");
            assert!(
                t.status.success(),
                "{name} ({writer}): transcript: {}",
                String::from_utf8_lossy(&t.stderr)
            );
            let transcript = String::from_utf8_lossy(&t.stdout);
            let slices = slice_names_in_transcript(&transcript);
            assert!(
                !slices.is_empty(),
                "{name} ({writer}): no slices in the transcript"
            );
            for (slice, count) in slices {
                // A kernel address (perf printed it negative): the transcript keeps perf's
                // stacks, a user-space FXT trace folds them into one `[kernel]` frame.
                if slice.starts_with("[unknown @ -0x") {
                    assert!(
                        report.count("[kernel]") > 0,
                        "{name} ({writer}): kernel frame {slice:?} not folded into [kernel]"
                    );
                    continue;
                }
                let got = report.count(&slice);
                // A begin/end pair is two events, a complete or instant one.
                assert!(
                count <= got && got <= 2 * count,
                "{name} ({writer}): slice {slice:?} appears {got} times in the FXT, {count} in the transcript"
            );
            }

            if let Some(py) = &py {
                let o = Command::new(py)
                    .arg(repo().join("tests/fxt_check.py"))
                    .arg(&out)
                    .output()
                    .expect("python");
                assert!(
                    o.status.success(),
                    "{name}: fxt_check.py: {}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            n += 1;
        }
    }
    assert_eq!(n, 18);
}
