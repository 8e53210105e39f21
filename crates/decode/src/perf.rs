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
use std::path::PathBuf;
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
    /// `None` reads it from `input`'s header.
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
        // failure. It still dies with ptscope, however ptscope ends.
        std::os::unix::process::CommandExt::process_group(cmd, 0);
        ptscope_interrupt::children::die_with_ptscope(cmd);
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
            None => crate::header::read_header(&options.input)?.kind(),
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
