//! Cross-checks FxtSink output with an independent reader: the PyPI `fxt` package,
//! through `tests/fxt_check.py`.
//!
//! The interpreter is `$PTSCOPE_FXT_PYTHON`, else the repo's `.venv/bin/python`, else
//! `/work/main/.venv/bin/python`, else `python3`. If it cannot import `fxt` the test
//! fails under CI (`$CI` set) and is skipped loudly otherwise.

use ptscope_output::{open_trace_output, FxtSink};
use ptscope_stacks::{Arg, ArgValue, TraceSink};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("PTSCOPE_FXT_PYTHON") {
        return PathBuf::from(p);
    }
    for candidate in [
        repo_root().join(".venv/bin/python"),
        PathBuf::from("/work/main/.venv/bin/python"),
    ] {
        if candidate.exists() {
            return candidate;
        }
    }
    PathBuf::from("python3")
}

/// Returns the interpreter if it can import `fxt`; panics under CI, else `None`.
fn python_with_fxt() -> Option<PathBuf> {
    let py = python();
    let ok = Command::new(&py)
        .args(["-c", "import fxt.reader, fxt.transform"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(py);
    }
    let msg = format!(
        "the Python package `fxt` is not importable by {}: install it with \
         `python3 -m venv .venv && .venv/bin/pip install fxt==0.3.0` or set PTSCOPE_FXT_PYTHON",
        py.display()
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("\n!!!!!!!! SKIPPED python fxt cross-check: {msg} !!!!!!!!\n");
    None
}

/// Output of `fxt_check.py` on `files`: (success, stdout, stderr).
fn run_checker(py: &Path, files: &[&Path]) -> (bool, String, String) {
    let out = Command::new(py)
        .arg(repo_root().join("tests/fxt_check.py"))
        .args(files)
        .output()
        .expect("run the python checker");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const NAMES: usize = 41_000;
const THREADS: usize = 310;

/// Writes nested slices, completes, instants and counters over many threads with
/// more distinct names than the string table holds. Returns (spans, events) written.
fn representative_trace(path: &Path) -> (usize, usize) {
    let mut sink = FxtSink::new(open_trace_output(path).unwrap());
    let mut threads = Vec::new();
    for p in 0..THREADS / 10 {
        let pid = sink.allocate_pid(&format!("process {p} [pid={}]", 1000 + p));
        for t in 0..10 {
            threads.push(sink.allocate_thread(pid, &format!("thread {t}")));
        }
    }
    let (mut spans, mut events) = (0, 0);
    let mut time = 0i64;
    let mut name = String::new();
    for i in 0..NAMES {
        let t = threads[i % threads.len()];
        name.clear();
        name.push_str(&format!("module_{}::function_{i}", i % 97));
        time += 10;
        match i % 4 {
            0 => {
                sink.duration_begin(t, &name, time, &[Arg::new("i", ArgValue::Int(i as i64))]);
                sink.duration_complete(
                    t,
                    "child",
                    time + 1,
                    time + 3,
                    &[Arg::new("file", ArgValue::Interned("lib.rs"))],
                );
                sink.duration_instant(t, "mark", time + 4, &[]);
                sink.duration_end(t, &name, time + 5, &[]);
                spans += 2;
                events += 4;
            }
            1 => {
                sink.duration_complete(
                    t,
                    &name,
                    time,
                    time + 5,
                    &[Arg::new("note", ArgValue::Str("inline"))],
                );
                spans += 1;
                events += 1;
            }
            2 => {
                sink.duration_instant(t, &name, time, &[Arg::new("p", ArgValue::Pointer(0x1000))]);
                events += 1;
            }
            _ => {
                sink.duration_begin(t, &name, time, &[]);
                sink.counter(
                    t,
                    "CPU",
                    time + 1,
                    &[Arg::new("ipc", ArgValue::Float(1.25))],
                );
                sink.duration_end(t, &name, time + 2, &[]);
                spans += 1;
                events += 3;
            }
        }
    }
    assert!(sink.writer_stats().string_evictions > 0);
    assert!(sink.writer_stats().thread_evictions > 0);
    sink.finish_output().unwrap();
    (spans, events)
}

#[test]
fn python_fxt_reads_a_large_trace() {
    let Some(py) = python_with_fxt() else {
        return;
    };
    let scratch = tempfile::tempdir().expect("temporary directory");
    let dir = scratch.path();
    let gz = dir.join("python_check.fxt.gz");
    let raw = dir.join("python_check.fxt");
    let (spans, events) = representative_trace(&gz);
    let _ = representative_trace(&raw);
    let (ok, stdout, stderr) = run_checker(&py, &[&gz, &raw]);
    assert!(ok, "fxt_check.py failed:\n{stdout}\n{stderr}");
    let want = format!(
        "providers=1 processes={} threads={THREADS} spans={spans} events={events}",
        THREADS / 10
    );
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    for line in stdout.lines() {
        assert!(line.ends_with(&want), "got {line:?}, want {want:?}");
    }
    std::fs::remove_file(&gz).unwrap();
    std::fs::remove_file(&raw).unwrap();
}

#[test]
fn python_checker_rejects_broken_traces() {
    let Some(py) = python_with_fxt() else {
        return;
    };
    let scratch = tempfile::tempdir().expect("temporary directory");
    let dir = scratch.path();
    let mut w = ptscope_fxt::FxtWriter::new(Vec::new());
    let t = w.thread(1, 2);
    w.begin(t, "", "a", 0, &[]);
    w.end(t, "", "b", 1, &[]);
    let mismatched = w.finish().unwrap();
    let mut w = ptscope_fxt::FxtWriter::new(Vec::new());
    let t = w.thread(1, 2);
    w.complete(t, "", "x", 0, 100, &[]);
    let good = w.finish().unwrap();
    let cases: [(&str, &[u8], &str); 3] = [
        ("mismatch.fxt", &mismatched, "transform error"),
        (
            "truncated.fxt",
            &good[..good.len() - 8],
            "unexpected end of file",
        ),
        ("garbage.fxt", b"not an fxt file!", "parse error"),
    ];
    for (name, bytes, why) in cases {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let (ok, stdout, stderr) = run_checker(&py, &[&path]);
        assert!(!ok, "{name} passed: {stdout}");
        assert!(stderr.contains(why), "{name}: {stderr}");
        std::fs::remove_file(&path).unwrap();
    }
}
