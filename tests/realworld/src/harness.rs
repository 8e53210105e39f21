//! Running the built `ptscope` binary on real programs, the way a user does, and the checks
//! every run must pass (exit 0, no panic, nothing left in TMPDIR, a valid trace).

use crate::trace::Trace;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The repository root (this crate lives in `tests/realworld`).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// This crate's own small programs.
pub fn programs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("programs")
}

/// Whether a missing tool fails the test (CI) instead of skipping it.
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// Skips loudly, or fails under CI. Returns `false` so callers can `return` on it.
pub fn skip(test: &str, why: &str) -> bool {
    assert!(!in_ci(), "{test}: cannot run in CI: {why}");
    eprintln!("\n!!!!!!!! SKIPPED {test}: {why} !!!!!!!!\n");
    false
}

/// The ptscope binary under test.
///
/// `cargo test` builds a crate's own binaries only, so this crate finds the CLI's:
/// `$PTSCOPE_BIN`, else `$CARGO_TARGET_DIR/debug/ptscope`, else `target/debug/ptscope` in
/// the repository. `scripts/test` builds it first. A missing binary, or one older than a
/// source file it was built from (cargo's `ptscope.d` beside it lists them), fails with
/// the command that fixes it: testing a stale binary would report on code that is gone.
pub fn ptscope_bin() -> PathBuf {
    let bin = if let Some(p) = std::env::var_os("PTSCOPE_BIN") {
        return PathBuf::from(p);
    } else if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        PathBuf::from(t).join("debug/ptscope")
    } else {
        repo().join("target/debug/ptscope")
    };
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| {
            panic!(
                "the ptscope binary {} is missing ({e}): build it with `cargo build -p ptscope` \
                 (scripts/test does), or point PTSCOPE_BIN at one",
                bin.display()
            )
        });
    if let Some(newer) = newer_source(&bin.with_extension("d"), built) {
        panic!(
            "the ptscope binary {} is older than its source {}: rebuild it with \
             `cargo build -p ptscope` (or set PTSCOPE_BIN to test a given binary)",
            bin.display(),
            newer.display()
        );
    }
    bin
}

/// A file listed in cargo's dep-info file `dep_info` modified after `built`, if any.
fn newer_source(dep_info: &Path, built: SystemTime) -> Option<PathBuf> {
    let text = std::fs::read_to_string(dep_info).ok()?;
    let first = text.lines().next()?;
    let (_, deps) = first.split_once(": ")?;
    // Paths are separated by spaces; a space inside a path is escaped as `\ `.
    let mut paths = Vec::new();
    let mut cur = String::new();
    let mut chars = deps.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => cur.extend(chars.next()),
            ' ' => paths.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    paths.push(cur);
    paths
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .find(|p| {
            std::fs::metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|m| m > built)
        })
}

/// The full path of `name` if it is an executable in a system directory, else `None`.
///
/// Only root-owned system directories are searched: these tests run as root and must not
/// run whatever another user put first on PATH.
pub fn system_tool(name: &str) -> Option<PathBuf> {
    [
        "/usr/bin",
        "/bin",
        "/usr/sbin",
        "/usr/local/bin",
        "/usr/lib/go/bin",
    ]
    .iter()
    .map(|d| Path::new(d).join(name))
    .find(|p| p.is_file())
}

/// `system_tool`, or a loud skip (a failure under CI) naming the Debian package.
pub fn need_tool(test: &str, name: &str, package: &str) -> Option<PathBuf> {
    let found = system_tool(name);
    if found.is_none() {
        skip(
            test,
            &format!("`{name}` is not installed (apt-get install {package})"),
        );
    }
    found
}

/// Whether ptscope can record here (root and a working perf); otherwise a loud skip.
pub fn can_record(test: &str) -> bool {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(str::to_owned))
        })
        .and_then(|u| u.parse::<u32>().ok());
    if uid != Some(0) {
        return skip(test, "not root: perf cannot record here");
    }
    let Some(perf) = system_tool("perf") else {
        return skip(test, "perf is not installed (apt-get install linux-perf)");
    };
    let ok = Command::new(perf)
        .args([
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "-o",
            "/dev/null",
            "--",
            "true",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok || skip(test, "`perf record -e cpu-clock -- true` fails here")
}

/// Runs a build command; panics with its output if it fails.
pub fn build(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One ptscope invocation that has finished.
pub struct Finished {
    /// What ran, for messages.
    pub what: String,
    /// Exit status, stdout and stderr.
    pub output: Output,
    /// Wall-clock time from spawn to exit.
    pub elapsed: Duration,
}

impl Finished {
    /// stderr as text.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
}

/// A ptscope command with its own fresh TMPDIR, checked when it finishes.
pub struct Ptscope {
    cmd: Command,
    what: String,
    tmp: tempfile::TempDir,
}

impl Ptscope {
    /// `ptscope ARGS…`, with TMPDIR set to a new empty directory.
    pub fn new<I, S>(args: I) -> Ptscope
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let tmp = tempfile::Builder::new()
            .prefix("ptscope-realworld-tmpdir")
            .tempdir()
            .expect("a temporary directory");
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let what = format!(
            "ptscope {}",
            args.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        );
        let mut cmd = Command::new(ptscope_bin());
        cmd.args(&args)
            .env("TMPDIR", tmp.path())
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null());
        Ptscope { cmd, what, tmp }
    }

    /// The command, to add environment or change stdio.
    pub fn cmd(&mut self) -> &mut Command {
        &mut self.cmd
    }

    /// Runs to completion and checks the run (see `Ptscope::check`).
    pub fn run(mut self) -> Finished {
        let start = Instant::now();
        let output = self
            .cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.what));
        let done = Finished {
            what: self.what.clone(),
            output,
            elapsed: start.elapsed(),
        };
        self.check(&done);
        done
    }

    /// Runs to completion, success or failure; either way no panic and TMPDIR left empty
    /// (a failure must also come with an error message).
    pub fn run_either(mut self) -> Finished {
        let me = &mut self;
        let start = Instant::now();
        let output = me
            .cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", me.what));
        let done = Finished {
            what: me.what.clone(),
            output,
            elapsed: start.elapsed(),
        };
        if !done.output.status.success() {
            assert!(
                done.stderr().contains("error"),
                "{} failed without an error message:\n{}",
                done.what,
                done.stderr()
            );
        }
        me.check_clean(&done);
        done
    }

    /// Starts it with stdout and stderr captured; finish with [`Ptscope::wait`].
    pub fn spawn(&mut self) -> (Child, Instant) {
        self.cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let child = self
            .cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.what));
        (child, Instant::now())
    }

    /// Waits for a spawned run and checks it.
    pub fn wait(self, child: Child, start: Instant) -> Finished {
        let done = self.finished(child, start);
        self.check(&done);
        done
    }

    /// Waits for a spawned run, success or failure; either way no panic and TMPDIR left
    /// empty (see [`Ptscope::run_either`]).
    pub fn wait_either(self, child: Child, start: Instant) -> Finished {
        let done = self.finished(child, start);
        self.check_clean(&done);
        done
    }

    fn finished(&self, child: Child, start: Instant) -> Finished {
        let output = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("waiting for {}: {e}", self.what));
        Finished {
            what: self.what.clone(),
            output,
            elapsed: start.elapsed(),
        }
    }

    /// The command line, for messages.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// Exit 0, no panic text on stderr, and TMPDIR left as empty as it was given.
    fn check(&self, done: &Finished) {
        let stderr = done.stderr();
        assert!(
            done.output.status.success(),
            "{} failed ({}):\n{stderr}",
            done.what,
            done.output.status
        );
        self.check_clean(done);
    }

    /// No panic text on stderr, and TMPDIR left as empty as it was given.
    fn check_clean(&self, done: &Finished) {
        let stderr = done.stderr();
        assert!(
            !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
            "{} panicked:\n{stderr}",
            done.what
        );
        let left: Vec<String> = std::fs::read_dir(self.tmp.path())
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            left.is_empty(),
            "{} left files in its TMPDIR: {left:?}",
            done.what
        );
    }
}

/// The checks every trace gets: valid FXT (our checker, and the PyPI `fxt` checker when
/// `PTSCOPE_FXT_PYTHON` is set), some slices, and a time span no longer than the run
/// that recorded it (`recorded`).
pub fn load_checked(path: &Path, recorded: &Finished) -> Trace {
    let trace = Trace::load(path);
    assert!(
        trace.report.is_ok(),
        "{}: the trace {} is not valid FXT: {}",
        recorded.what,
        path.display(),
        trace.report
    );
    assert!(
        trace.slice_count() > 0,
        "{}: the trace {} has no slices: {}",
        recorded.what,
        path.display(),
        trace.report
    );
    let span = trace.span_seconds();
    assert!(
        span <= recorded.elapsed.as_secs_f64(),
        "{}: the trace {} spans {span:.3} s but the whole run took {:.3} s",
        recorded.what,
        path.display(),
        recorded.elapsed.as_secs_f64()
    );
    python_check(path);
    trace
}

/// `ptscope decode WORK -o OUT EXTRA…` on a recording kept by `recorded` (`run -w WORK`),
/// checked like the run itself.
pub fn decode(work: &Path, out: &Path, extra: &[&str], recorded: &Finished) -> Trace {
    let mut args: Vec<OsString> = vec!["decode".into(), "--quiet".into()];
    args.push(work.into());
    args.push("-o".into());
    args.push(out.into());
    args.extend(extra.iter().map(OsString::from));
    Ptscope::new(args).run();
    load_checked(out, recorded)
}

/// Decodes the working directory `work` with `--decoder text` and `--decoder dlfilter`
/// (into `dir`) and panics unless both traces hold the same slices; returns the text one.
/// Both decoders must give one trace: `what` names the recording in the message.
pub fn assert_decoders_agree(work: &Path, dir: &Path, recorded: &Finished, what: &str) -> Trace {
    let text = decode(
        work,
        &dir.join("text.fxt.gz"),
        &["--decoder", "text"],
        recorded,
    );
    let dl = decode(
        work,
        &dir.join("dl.fxt.gz"),
        &["--decoder", "dlfilter"],
        recorded,
    );
    text.assert_same_slices(
        &dl,
        &format!("{what}: --decoder text vs --decoder dlfilter"),
    );
    text
}

/// Runs `tests/fxt_check.py` (PyPI `fxt`) on the file when `PTSCOPE_FXT_PYTHON` is set.
pub fn python_check(path: &Path) {
    let Some(py) = std::env::var_os("PTSCOPE_FXT_PYTHON") else {
        return;
    };
    let out = Command::new(&py)
        .arg(repo().join("tests/fxt_check.py"))
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {py:?}: {e}"));
    assert!(
        out.status.success(),
        "the PyPI fxt checker rejects {}:\n{}{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Sends SIGINT to `pid` (as Ctrl-C in a terminal does).
pub fn interrupt(pid: u32) {
    let st = Command::new("/bin/kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .expect("run /bin/kill");
    assert!(st.success(), "kill -INT {pid} failed");
}

/// Turns mixed strings and paths into command-line arguments.
pub fn args(parts: &[&dyn AsRef<OsStr>]) -> Vec<OsString> {
    parts.iter().map(|p| p.as_ref().to_owned()).collect()
}

/// `ptscope run --quiet OPTIONS… -o DIR/NAME.fxt.gz -- COMMAND…`, checked, and its trace
/// loaded and checked.
pub fn record(
    dir: &Path,
    name: &str,
    options: &[&str],
    command: &[&dyn AsRef<OsStr>],
) -> (Finished, Trace) {
    record_with(dir, name, options, command, |_| {})
}

/// [`record`], with `setup` applied to the ptscope command first (environment, working
/// directory: the recorded program inherits both).
pub fn record_with(
    dir: &Path,
    name: &str,
    options: &[&str],
    command: &[&dyn AsRef<OsStr>],
    setup: impl FnOnce(&mut Command),
) -> (Finished, Trace) {
    let out = dir.join(format!("{name}.fxt.gz"));
    let mut a: Vec<OsString> = vec!["run".into(), "--quiet".into()];
    a.extend(options.iter().map(OsString::from));
    a.push("-o".into());
    a.push(out.clone().into());
    a.push("--".into());
    a.extend(args(command));
    let mut p = Ptscope::new(a);
    setup(p.cmd());
    let run = p.run();
    let trace = load_checked(&out, &run);
    (run, trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The TMPDIR check catches a leftover file. `PTSCOPE_BIN` points at a shell that
    /// leaves one (the only test in this binary that sets it).
    #[test]
    #[should_panic(expected = "left files in its TMPDIR")]
    fn a_leftover_in_tmpdir_fails_the_run() {
        std::env::set_var("PTSCOPE_BIN", "/bin/sh");
        Ptscope::new(["-c", "touch \"$TMPDIR/leftover\""]).run();
    }
}
