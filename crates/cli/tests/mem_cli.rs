//! End-to-end tests of `ptscope mem …` against the memtrace fixtures.

use std::path::PathBuf;
use std::process::{Command, Output};

#[path = "../../../tests/fixtures_dir.rs"]
mod fixture_dir;

fn fixtures() -> PathBuf {
    fixture_dir::fixtures_dir().join("memtrace")
}

fn ptscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ptscope"))
        .args(args)
        .current_dir(fixtures())
        .output()
        .expect("run ptscope")
}

/// A gzip'd reference output (through the output crate: the CLI has no gzip dependency).
fn gunzip(name: &str) -> Vec<u8> {
    let data = std::fs::read(fixtures().join(name)).expect("fixture");
    ptscope_output::gunzip_if_needed(data).expect("gunzip")
}

fn ok_stdout(args: &[&str]) -> Vec<u8> {
    let o = ptscope(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

/// A path named `name` in a private temporary directory; the directory is removed when
/// the returned guard drops (also when the test fails).
fn tmp(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("ptscope-mem-cli-")
        .tempdir()
        .expect("temporary directory");
    let path = dir.path().join(name);
    (dir, path)
}

#[test]
fn dump_identify_flamegraph_match_the_reference_tools() {
    for name in [
        "ocamlopt_v3",
        "wrap",
        "locs",
        "multi",
        "ocamlopt_v3.strip_names",
    ] {
        let file = format!("{name}.ctf");
        assert!(
            ok_stdout(&["mem", "dump", &file]) == gunzip(&format!("{name}.dump.txt.gz")),
            "dump {name}"
        );
        if name != "ocamlopt_v3.strip_names" {
            let want =
                std::fs::read(fixtures().join(format!("{name}.identify.txt"))).expect("fixture");
            assert_eq!(
                String::from_utf8_lossy(&ok_stdout(&["mem", "identify", &file])),
                String::from_utf8_lossy(&want),
                "identify {name}"
            );
        }
    }
    assert!(
        ok_stdout(&["mem", "flamegraph", "ocamlopt_v3.ctf"])
            == gunzip("ocamlopt_v3.flamegraph.txt.gz")
    );
}

#[test]
fn strip_names_and_subsample_write_the_reference_bytes() {
    let (_tmp_out, out) = tmp("stripped.ctf");
    ok_stdout(&[
        "mem",
        "strip-names",
        "ocamlopt_v3.ctf",
        "-o",
        out.to_str().unwrap(),
    ]);
    let want = std::fs::read(fixtures().join("ocamlopt_v3.strip_names.ctf")).expect("fixture");
    assert!(
        std::fs::read(&out).expect("output") == want,
        "strip-names output differs"
    );
    let (_tmp_out, out) = tmp("sub1.ctf");
    ok_stdout(&[
        "mem",
        "subsample",
        "ocamlopt_v3.ctf",
        "1",
        "-o",
        out.to_str().unwrap(),
    ]);
    let want = std::fs::read(fixtures().join("ocamlopt_v3.ctf")).expect("fixture");
    assert!(
        std::fs::read(&out).expect("output") == want,
        "subsample 1 is not the identity"
    );
}

#[test]
fn hotspots_names_the_trace_and_its_top_site() {
    let text = String::from_utf8(ok_stdout(&["mem", "hotspots", "multi.ctf"])).expect("utf8");
    assert!(
        text.starts_with("Trace for exec [11]:\n   33333 samples of"),
        "{text}"
    );
    assert!(text.contains("%) at "), "{text}");
}

#[test]
fn convert_writes_a_valid_perfetto_trace_with_counters_and_sites() {
    let (_tmp_out, out) = tmp("ocamlopt.fxt.gz");
    ok_stdout(&[
        "mem",
        "convert",
        "ocamlopt_v3.ctf",
        "-o",
        out.to_str().unwrap(),
        "--top-sites",
        "5",
    ]);
    let bytes = ptscope_output::read_trace_file(&out).expect("read back");
    let report = ptscope_fxt::check::validate_bytes(&bytes);
    assert!(report.is_ok(), "{report}");
    assert!(report.count("live heap (bytes)") > 10);
    assert!(report.count("allocation rate (bytes/s)") > 10);
    assert!(report.count("promotion/collection rate (bytes/s)") > 10);
    // One track per top site, named after it, each with one slice.
    let site_threads: Vec<&str> = report
        .thread_names
        .values()
        .map(|t| t.name.as_str())
        .filter(|n| n.starts_with("site #"))
        .collect();
    assert_eq!(site_threads.len(), 5, "{site_threads:?}");
    assert!(site_threads.iter().any(|n| n.starts_with("site #1 ")));
    assert_eq!(report.processes.len(), 1);
}

#[test]
fn bad_input_fails_with_the_file_and_cause() {
    let o = ptscope(&["mem", "dump", "no-such-file.ctf"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no-such-file.ctf"), "{err}");
    let (_tmp_bad, bad) = tmp("bad.ctf");
    let mut data = std::fs::read(fixtures().join("wrap.ctf")).expect("fixture");
    data[0] ^= 0xff;
    std::fs::write(&bad, &data).expect("write");
    let o = ptscope(&["mem", "identify", bad.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.ctf") && err.contains("not a CTF packet"),
        "{err}"
    );
    // A truncated trace still dumps what it holds, with a note.
    let (_tmp_cut, cut) = tmp("cut.ctf");
    let data = std::fs::read(fixtures().join("ocamlopt_v3.ctf")).expect("fixture");
    std::fs::write(&cut, &data[..data.len() / 2]).expect("write");
    let o = ptscope(&["mem", "dump", cut.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("skipping truncated packet"));
    let full = gunzip("ocamlopt_v3.dump.txt.gz");
    assert!(!o.stdout.is_empty() && full.starts_with(&o.stdout));
}
