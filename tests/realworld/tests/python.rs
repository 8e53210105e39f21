//! Debian's python3 running `programs/hot.py`: directly (both decoders, both writers,
//! DWARF and frame-pointer call graphs, a trigger) and through a pyenv-style exec shim.

use ptscope_realworld::harness::{
    assert_decoders_agree, can_record, decode, load_checked, programs, skip, Ptscope,
};
use ptscope_realworld::trace::Trace;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

const PYTHON: &str = "/usr/bin/python3";

/// Debian's interpreter, if this machine can record it.
fn python(test: &str) -> Option<PathBuf> {
    if !can_record(test) {
        return None;
    }
    if !Path::new(PYTHON).is_file() {
        skip(
            test,
            "/usr/bin/python3 is missing (apt-get install python3)",
        );
        return None;
    }
    Some(PYTHON.into())
}

fn args(parts: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<OsString> {
    parts.iter().map(|p| p.as_ref().to_owned()).collect()
}

/// What hot.py's hot spots look like from the interpreter's C code. Debian's python3 is
/// stripped: only its exported (dynamic) symbols have names, so these are all `Py*` API
/// functions; the static ones (list_sort_impl, …) are named after their `.eh_frame` FDE
/// (`python3.11+0x…`).
fn check_python_stacks(t: &Trace) {
    // The evaluation loop runs the script's code under the interpreter's entry points.
    t.assert_under(
        "_PyEval_EvalFrameDefault",
        &["PyEval_EvalCode", "Py_RunMain", "Py_BytesMain"],
    );
    // build_strings/sort_words: str(int) called from Python code.
    t.assert_under("PyObject_Str", &["_PyEval_EvalFrameDefault", "Py_RunMain"]);
    // build_strings: ",".join(...) called from Python code.
    t.assert_under(
        "_PyUnicode_JoinArray",
        &["_PyEval_EvalFrameDefault", "Py_RunMain"],
    );
    // (sort_words' comparisons run in libc's memcmp, whose samples DWARF unwinding often
    // cannot walk out of: not checked.)
}

#[test]
fn python3_run_dwarf_text_and_dlfilter_decoders_and_both_writers() {
    let test = "python3_run_dwarf_text_and_dlfilter_decoders_and_both_writers";
    let Some(py) = python(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("rec");
    let out = dir.path().join("run.fxt.gz");
    let run = Ptscope::new(args(&[
        &"run",
        &"--quiet",
        &"--callgraph",
        &"dwarf",
        &"-w",
        &work,
        &"-o",
        &out,
        &"--",
        &py,
        &programs().join("hot.py"),
        &"2",
    ]))
    .run();
    let t = load_checked(&out, &run);
    check_python_stacks(&t);

    let text = assert_decoders_agree(&work, dir.path(), &run, "python3");
    check_python_stacks(&text);

    let legacy = decode(
        &work,
        &dir.path().join("legacy.fxt.gz"),
        &["--writer", "legacy"],
        &run,
    );
    check_python_stacks(&legacy);

    t.assert_process_named("python3");
}

#[test]
fn python3_run_fp() {
    // Debian builds python3 without frame pointers, so the stacks are short; the trace
    // must still be valid and show the interpreter's functions.
    let test = "python3_run_fp";
    let Some(py) = python(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fp.fxt.gz");
    let run = Ptscope::new(args(&[
        &"run",
        &"--quiet",
        &"--callgraph",
        &"fp",
        &"-o",
        &out,
        &"--",
        &py,
        &programs().join("hot.py"),
        &"1",
    ]))
    .run();
    let t = load_checked(&out, &run);
    assert!(
        t.has("_PyEval_EvalFrameDefault"),
        "no evaluation loop in the trace: {}",
        t.summary()
    );
    t.assert_process_named("python3");
}

#[test]
fn python3_through_exec_shim() {
    let test = "python3_through_exec_shim";
    let Some(_) = python(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    // A copy in our private directory: the shim is executed as root.
    let shim = dir.path().join("python3");
    std::fs::copy(programs().join("pyshim.sh"), &shim).unwrap();
    let out = dir.path().join("shim.fxt.gz");
    let run = Ptscope::new(args(&[
        &"run",
        &"--quiet",
        &"-o",
        &out,
        &"--",
        &shim,
        &programs().join("hot.py"),
        &"2",
    ]))
    .run();
    let t = load_checked(&out, &run);
    // The shell exec'd the interpreter: the trace follows it through the exec.
    check_python_stacks(&t);
    t.assert_process_named("python3");
}
