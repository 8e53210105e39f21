//! Running `perf script` on a recording and decoding its output as it streams.
//!
//! ```no_run
//! use ptscope_decode::{PerfScript, PerfScriptOptions};
//!
//! let mut script = PerfScript::spawn(&PerfScriptOptions::new("perf.data"))?;
//! while let Some(event) = script.next_event()? {
//!     let _ = (event, script.strings());
//! }
//! // Drain first, then ask how perf exited: its stderr tail is in the error.
//! script.finish()?;
//! # Ok::<(), ptscope_decode::Error>(())
//! ```

use crate::{Decoder, Error, Stats, Warning};
use ptscope_event::source::{EventSource, Finished, SourceError};
use ptscope_event::{Event, StringTable};
use std::ffi::OsString;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;

/// How much of perf's stderr is kept for error messages.
pub const STDERR_TAIL: usize = 8 * 1024;

/// What a `perf.data` file holds, which decides the `perf script` fields.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum RecordingKind {
    /// An `intel_pt` recording: branches, decoded with `--itrace=bep`.
    IntelPt,
    /// A sampling recording (`cycles`, `cpu-clock`, …) with callchains.
    Sampling,
}

impl RecordingKind {
    /// The `perf script` arguments for this kind (after `-i FILE`): magic-trace's, plus
    /// `--show-task-events`, whose `PERF_RECORD_COMM`/`FORK` lines name the threads, and
    /// for sampling `--show-switch-events`, whose lines say when each thread was off CPU.
    pub fn script_args(self) -> &'static [&'static str] {
        match self {
            RecordingKind::IntelPt => &[
                "--ns",
                "--itrace=bep",
                "-F",
                "pid,tid,time,flags,ip,addr,sym,symoff,synth,dso,event,period",
                "--show-task-events",
            ],
            RecordingKind::Sampling => &[
                "--ns",
                "-F",
                "pid,tid,time,ip,sym,symoff,dso,event,period",
                "--show-task-events",
                "--show-switch-events",
            ],
        }
    }
}

/// Where perf is and what to run it on.
#[derive(Clone, Debug)]
pub struct PerfScriptOptions {
    /// The perf binary; defaults to `$PTSCOPE_PERF` or `perf` on `PATH`.
    pub perf: PathBuf,
    /// The `perf.data` file.
    pub input: PathBuf,
    /// `None` asks `perf evlist` which kind of recording `input` is.
    pub kind: Option<RecordingKind>,
    /// Appended to the `perf script` command line (e.g. `--dlfilter`, `--stitch-lbr`).
    pub extra_args: Vec<OsString>,
}

impl PerfScriptOptions {
    /// Options for `input` with the default perf and kind detection.
    pub fn new(input: impl Into<PathBuf>) -> Self {
        PerfScriptOptions {
            perf: default_perf(),
            input: input.into(),
            kind: None,
            extra_args: Vec::new(),
        }
    }
}

/// `$PTSCOPE_PERF`, else `perf`.
pub fn default_perf() -> PathBuf {
    std::env::var_os("PTSCOPE_PERF")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("perf"), PathBuf::from)
}

/// A command line as a person would type it, for error messages.
pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// The last [`STDERR_TAIL`] bytes of perf's stderr, as text.
pub fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_TAIL);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// How running perf went wrong: the one error every caller of [`PerfProcess`] reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PerfError {
    /// perf could not be started.
    #[error("could not run `{program}`: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// perf was started but could not be waited for.
    #[error("waiting for `{command}`: {source}")]
    Wait {
        /// The command line.
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// perf ran but exited unsuccessfully.
    #[error("`{command}` failed ({status}){}", stderr_suffix(.stderr))]
    Failed {
        /// The command line, for the message.
        command: String,
        /// How it exited.
        status: ExitStatus,
        /// The end of what it printed on stderr.
        stderr: String,
    },
}

fn stderr_suffix(stderr: &str) -> String {
    let t = stderr.trim();
    if t.is_empty() {
        String::new()
    } else {
        format!(":\n{t}")
    }
}

/// A running perf whose stdout the caller reads: its stderr is drained on a thread (only
/// the end kept, for error messages), and it is killed if dropped before being waited for.
/// Both decode paths (text and dlfilter) run perf through this.
#[derive(Debug)]
pub struct PerfProcess {
    child: Child,
    stderr: Option<JoinHandle<Vec<u8>>>,
    command: String,
    done: bool,
}

impl PerfProcess {
    /// Starts `cmd` with stdout and stderr piped; returns it and the stdout to read.
    pub fn spawn(cmd: &mut Command) -> Result<(PerfProcess, ChildStdout), PerfError> {
        // Its own process group: a terminal's Ctrl-C reaches ptscope, whose policy decides
        // (stop decoding and keep what was read), not perf, whose death would read as a
        // failure. It still dies with ptscope: its next write meets a closed pipe.
        std::os::unix::process::CommandExt::process_group(cmd, 0);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let command = describe(cmd);
        let program = cmd.get_program().to_string_lossy().into_owned();
        let spawn_error = |source| PerfError::Spawn { program, source };
        let mut child = cmd.spawn().map_err(spawn_error)?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(PerfError::Wait {
                command,
                source: std::io::Error::other("no pipes to the child"),
            });
        };
        register(child.id());
        let process = PerfProcess {
            child,
            stderr: Some(keep_stderr_tail(stderr)),
            command,
            done: false,
        };
        Ok((process, stdout))
    }

    /// The command line that was started, as a person would type it.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// Waits for perf (killing it first if its output was not drained, which is not a
    /// failure) and says how it failed, with the tail of its stderr, if it did.
    /// Once perf has been waited for, later calls return `Ok(())`.
    pub fn finish(&mut self, stopped_early: bool) -> Result<(), PerfError> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        unregister(self.child.id());
        if stopped_early {
            let _ = self.child.kill();
        }
        let status = self.child.wait().map_err(|source| PerfError::Wait {
            command: self.command.clone(),
            source,
        })?;
        let kept = self.take_stderr();
        if status.success() || stopped_early {
            return Ok(());
        }
        Err(PerfError::Failed {
            command: self.command.clone(),
            status,
            stderr: tail(&kept),
        })
    }

    /// Stops perf and returns the end of its stderr (to explain why its output stopped).
    pub fn kill_and_stderr(&mut self) -> String {
        unregister(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.done = true;
        tail(&self.take_stderr())
    }

    fn take_stderr(&mut self) -> Vec<u8> {
        self.stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for PerfProcess {
    fn drop(&mut self) {
        if !self.done {
            unregister(self.child.id());
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Running perf processes (pids, unregistered before they are reaped, so a pid here
/// is never a recycled one).
static RUNNING: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

fn register(pid: u32) {
    RUNNING.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
}

fn unregister(pid: u32) {
    RUNNING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|&p| p != pid);
}

/// Kills every perf this process started that is still running: a decode stopped by
/// an interrupt must not wait for a perf that has not printed its first line yet. The
/// readers then see their input end, and clean up as usual.
pub fn stop_all() {
    for &pid in RUNNING.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        // SAFETY: kill(2) of our own unreaped child (registered until just before reaping).
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
}

/// Drains a child's stderr on a thread of its own, keeping only the end: perf can
/// print a lot (e.g. lost-event notes), and a full pipe would stall it.
fn keep_stderr_tail(mut stderr: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > 2 * STDERR_TAIL {
                kept.drain(..kept.len() - STDERR_TAIL);
            }
        }
        kept
    })
}

/// Asks `perf evlist` whether `input` is an Intel PT recording.
pub fn detect_recording_kind(perf: &Path, input: &Path) -> Result<RecordingKind, Error> {
    let mut cmd = Command::new(perf);
    cmd.arg("evlist").arg("-i").arg(input).stdin(Stdio::null());
    let out = cmd.output().map_err(|source| PerfError::Spawn {
        program: perf.display().to_string(),
        source,
    })?;
    if !out.status.success() {
        return Err(PerfError::Failed {
            command: describe(&cmd),
            status: out.status,
            stderr: tail(&out.stderr),
        }
        .into());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    if text.lines().any(|l| l.contains("intel_pt")) {
        return Ok(RecordingKind::IntelPt);
    }
    // On a machine without the intel_pt PMU (decoding a recording made elsewhere) perf
    // cannot name the event: `unknown attr type: 8`. The file's own PMU table can.
    let unknown: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("unknown attr type: "))
        .map(|t| t.split(|c: char| !c.is_ascii_digit()).next().unwrap_or(""))
        .filter(|t| !t.is_empty())
        .collect();
    if !unknown.is_empty() && header_maps_intel_pt(perf, input, &unknown) {
        return Ok(RecordingKind::IntelPt);
    }
    Ok(RecordingKind::Sampling)
}

/// The scope a sampling recording asks for, from its first event's modifier as `perf
/// evlist` prints it: `cpu-clock:k` → k, `cycles/freq=1000/uk` → uk, `…:u` → u. None
/// (perf's default, both levels counted) means u: a trace of user space in which a
/// sample's time in the kernel is one `[kernel: …]` frame; `ptscope run` records its
/// default so, and its `--trace-include-kernel` with an explicit `uk`. `None` for Intel
/// PT recordings (their scope is a decoding choice) or when perf cannot tell.
pub fn recorded_scope(perf: &Path, input: &Path) -> Option<ptscope_event::TraceScope> {
    let out = Command::new(perf)
        .arg("evlist")
        .arg("-i")
        .arg(input)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))?;
    scope_of_event_name(first)
}

/// The scope an event name's modifier gives (see [`recorded_scope`]).
pub fn scope_of_event_name(name: &str) -> Option<ptscope_event::TraceScope> {
    use ptscope_event::TraceScope;
    if name.contains("intel_pt") || name.starts_with("unknown attr") {
        return None;
    }
    // `name/config/mods` or `name:mods`; a config may itself hold `:` or `/`.
    let mods = match (name.rfind('/'), name.rfind(':')) {
        (Some(slash), _) if name[..slash].contains('/') => &name[slash + 1..],
        (_, Some(colon)) => &name[colon + 1..],
        _ => "",
    };
    if !mods.chars().all(|c| c.is_ascii_alphabetic()) {
        return Some(TraceScope::UserspaceAndKernel);
    }
    Some(match (mods.contains('u'), mods.contains('k')) {
        (false, true) => TraceScope::Kernel,
        (true, true) => TraceScope::UserspaceAndKernel,
        _ => TraceScope::Userspace,
    })
}

/// True if the recording's `pmu mappings` header names one of `types` `intel_pt`.
fn header_maps_intel_pt(perf: &Path, input: &Path, types: &[&str]) -> bool {
    let out = Command::new(perf)
        .args(["report", "--header-only", "-i"])
        .arg(input)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    let Ok(out) = out else { return false };
    pmu_maps_intel_pt(&String::from_utf8_lossy(&out.stdout), types)
}

/// Reads `# pmu mappings: cpu = 4, intel_pt = 8` from `perf report --header-only`.
fn pmu_maps_intel_pt(header: &str, types: &[&str]) -> bool {
    header
        .lines()
        .filter(|l| l.contains("pmu mappings:"))
        .flat_map(|l| l.split(':').nth(1).unwrap_or("").split(','))
        .filter_map(|m| m.split_once('='))
        .any(|(name, ty)| name.trim() == "intel_pt" && types.contains(&ty.trim()))
}

#[cfg(test)]
mod tests {
    use super::{pmu_maps_intel_pt, scope_of_event_name};
    use ptscope_event::TraceScope;

    #[test]
    fn a_recording_asks_for_the_kernel_only_with_a_k_modifier() {
        let u = Some(TraceScope::Userspace);
        let uk = Some(TraceScope::UserspaceAndKernel);
        let k = Some(TraceScope::Kernel);
        for (name, want) in [
            // What `ptscope run` records: default, --trace-include-kernel, --kernel-only.
            ("cpu-clock/freq=10000/", u),
            ("cpu-clock/freq=10000/uk", uk),
            ("cpu-clock/freq=10000/k", k),
            ("cpu-clock/freq=10000/u", u),
            // perf's own names.
            ("cpu-clock", u),
            ("cycles:pp", u),
            ("cycles:ukpp", uk),
            ("cpu-clock:k", k),
            ("intel_pt//u", None),
        ] {
            assert_eq!(scope_of_event_name(name), want, "{name}");
        }
    }

    #[test]
    fn intel_pt_is_found_in_the_pmu_table() {
        let h = "# nrcpus online : 2\n# pmu mappings: cpu = 4, intel_pt = 8, software = 1\n";
        assert!(pmu_maps_intel_pt(h, &["8"]));
        assert!(!pmu_maps_intel_pt(h, &["4"]));
        assert!(!pmu_maps_intel_pt("# pmu mappings: cpu = 4\n", &["8"]));
    }
}

/// A running `perf script` whose stdout is decoded as it arrives.
///
/// Drain events with [`PerfScript::next_event`], then call [`PerfScript::finish`] to
/// learn whether perf succeeded; events decoded before a failure are never lost.
#[derive(Debug)]
pub struct PerfScript {
    decoder: Decoder<BufReader<ChildStdout>>,
    perf: PerfProcess,
    kind: RecordingKind,
}

impl PerfScript {
    /// Starts `perf script`; the script owns the table its events' names are interned in.
    pub fn spawn(options: &PerfScriptOptions) -> Result<Self, Error> {
        let kind = match options.kind {
            Some(k) => k,
            None => detect_recording_kind(&options.perf, &options.input)?,
        };
        let mut cmd = Command::new(&options.perf);
        cmd.arg("script")
            .arg("-i")
            .arg(&options.input)
            .args(kind.script_args())
            .args(&options.extra_args)
            .env("PAGER", "cat")
            .stdin(Stdio::null());
        let (perf, stdout) = PerfProcess::spawn(&mut cmd)?;
        Ok(PerfScript {
            decoder: Decoder::new(BufReader::with_capacity(1 << 20, stdout)),
            perf,
            kind,
        })
    }

    /// Which kind of recording perf is decoding.
    pub fn kind(&self) -> RecordingKind {
        self.kind
    }

    /// The command line that was started.
    pub fn command(&self) -> &str {
        self.perf.command()
    }

    /// The next event from perf's output; `Ok(None)` when perf closed its output.
    pub fn next_event(&mut self) -> Result<Option<Event>, Error> {
        self.decoder.next_event()
    }

    /// The decoder (stats, warnings, strings).
    pub fn decoder(&self) -> &Decoder<BufReader<ChildStdout>> {
        &self.decoder
    }

    /// Mutable access to the decoder.
    pub fn decoder_mut(&mut self) -> &mut Decoder<BufReader<ChildStdout>> {
        &mut self.decoder
    }

    /// The table the events' names are interned in.
    pub fn strings(&self) -> &StringTable {
        self.decoder.strings()
    }

    /// Gives the string table back.
    pub fn into_strings(self) -> StringTable {
        self.decoder.into_strings()
    }

    /// Waits for perf and reports how it exited, with its stderr tail on failure. If
    /// the events were not drained, perf is stopped first (that is not an error).
    pub fn finish(&mut self) -> Result<(), Error> {
        let stopped_early = !self.decoder.is_finished();
        Ok(self.perf.finish(stopped_early)?)
    }
}

impl EventSource for PerfScript {
    fn next_event(&mut self) -> Result<Option<Event>, SourceError> {
        Ok(self.decoder.next_event()?)
    }
    fn strings(&self) -> &StringTable {
        self.decoder.strings()
    }
    fn stats(&self) -> Stats {
        *self.decoder.stats()
    }
    fn warnings(&self) -> Vec<Warning> {
        self.decoder.warnings().to_vec()
    }
    fn finish(mut self: Box<Self>) -> Finished {
        let failure = PerfScript::finish(&mut self).err().map(SourceError::from);
        Finished {
            failure,
            ..Finished::new(self.into_strings())
        }
    }
}
