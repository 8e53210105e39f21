//! What the `--backend emulate` tests share: the binary, the plugin (built if needed; the
//! tests skip loudly without qemu-x86_64 or gcc, and fail in CI), running ptscope with
//! the plugin, and building C programs. Included with `#[path]` by each such test file.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The ptscope binary under test.
pub fn ptscope() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ptscope"))
}

/// The plugin, built if needed; `None` (skip) when qemu or gcc is missing outside CI.
pub fn plugin() -> Option<PathBuf> {
    if !ptsim::testing::tools_available(&["qemu-x86_64", "gcc"]) {
        return None;
    }
    Some(ptsim::testing::plugin().expect("the qemu plugin builds"))
}

/// `ptscope ARGS` in `dir`, with `plugin` as the emulate plugin.
pub fn run(plugin: &Path, dir: &Path, args: &[&str]) -> Output {
    Command::new(ptscope())
        .env("PTSCOPE_EMULATE_PLUGIN", plugin)
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run ptscope")
}

/// [`run`], which must succeed; gives its stderr.
pub fn run_ok(plugin: &Path, dir: &Path, args: &[&str]) -> String {
    let out = run(plugin, dir, args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "ptscope {args:?} failed: {err}");
    err
}

/// `gcc -O2 -o NAME NAME.c EXTRA` in `dir`, from the C source `src`.
pub fn compile(dir: &Path, name: &str, src: &str, extra: &[&str]) {
    let file = format!("{name}.c");
    std::fs::write(dir.join(&file), src).expect("write source");
    let st = Command::new("gcc")
        .args(["-O2", "-o", name, &file])
        .args(extra)
        .current_dir(dir)
        .status()
        .expect("gcc");
    assert!(st.success(), "gcc failed on {file}");
}

/// `ptscope decode REC --executable EXE --format transcript`, which must succeed.
pub fn transcript(plugin: &Path, dir: &Path, rec: &str, exe: &str) -> String {
    let args = [
        "decode",
        rec,
        "--executable",
        exe,
        "--format",
        "transcript",
        "-o",
        "-",
    ];
    let out = run(plugin, dir, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ptscope {args:?} failed: {err}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ptscope run --backend emulate -w rec -o t.fxt.gz -- PROG`, which must succeed; gives
/// the program's stdout and ptscope's stderr.
pub fn record_ok(plugin: &Path, dir: &Path, prog: &str) -> (String, String) {
    let args = [
        "run",
        "--backend",
        "emulate",
        "-w",
        "rec",
        "-o",
        "t.fxt.gz",
        "--",
        prog,
    ];
    let out = run(plugin, dir, &args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "ptscope {args:?} failed: {err}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), err)
}
