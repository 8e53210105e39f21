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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

/// Whether `perf script` has the `--inline` option (and so `--no-inline`: perf's options
/// each have their negation), read from its usage (`perf script -h`) once per perf
/// binary. Where it has, perf expands inlined calls in callchains through an `addr2line`
/// child per DSO unless told `--no-inline`: 80 times the rest of a decode on a `make -j2`
/// recording, and on node's a lookup that never answered. ptscope expands them itself
/// (`ptscope_symbols::InlineInfo`); a perf without the option never expands them.
pub fn script_has_inline_option(perf: &std::path::Path) -> bool {
    static KNOWN: std::sync::Mutex<Vec<(PathBuf, bool)>> = std::sync::Mutex::new(Vec::new());
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, has)) = known.iter().find(|(p, _)| p == perf) {
        return *has;
    }
    let has = ptscope_interrupt::children::die_with_ptscope(&mut Command::new(perf))
        .args(["script", "-h"])
        .env("PAGER", "cat")
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|out| {
            let listed = |text: &[u8]| {
                String::from_utf8_lossy(text)
                    .lines()
                    .any(|l| l.trim_start().starts_with("--inline"))
            };
            listed(&out.stdout) || listed(&out.stderr)
        });
    known.push((perf.to_path_buf(), has));
    has
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
    /// perf made no progress (no output for ptscope, no CPU time of its own) for
    /// `waited`, and was stopped: see [`PerfOutput`].
    #[error("{}", stall_text(.command, .waited, .waiting_for))]
    Stalled {
        /// The command line, for the message.
        command: String,
        /// How long it made no progress.
        waited: Duration,
        /// The child perf was waiting for, if any: its command line and CPU time.
        waiting_for: Option<(String, Duration)>,
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

/// What a stalled perf was doing, and what to do about it.
fn stall_text(command: &str, waited: &Duration, child: &Option<(String, Duration)>) -> String {
    format!(
        "{}. The trace holds what was decoded before it; if perf is only slow on this \
         recording, set {STALL_ENV}=SECONDS above {} and decode again",
        stall_summary(command, waited, child),
        waited.as_secs()
    )
}

/// How a perf stopped by the watchdog was stuck, in one sentence without advice.
pub fn stall_summary(
    command: &str,
    waited: &Duration,
    child: &Option<(String, Duration)>,
) -> String {
    let mut t = format!(
        "`{command}` made no progress for {} s (no output and no CPU time of its own) and was \
         stopped",
        waited.as_secs()
    );
    match child {
        Some((cmd, cpu)) => {
            let what = if is_addr2line(cmd) {
                " (perf's own lookup of inlined functions)"
            } else {
                ""
            };
            t.push_str(&format!(
                ": it was waiting for `{cmd}`{what}, which had used {:.1} s of CPU",
                cpu.as_secs_f64()
            ));
        }
        None => t.push_str(": perf itself was idle (a hung file system, or a perf bug)"),
    }
    t
}

/// Whether a command line runs addr2line (binutils' or llvm's): perf's lookup of
/// inlined functions and source lines. The program is the first word, or the second
/// after an interpreter (`/bin/sh …/addr2line -e FILE`, a script on PATH).
pub fn is_addr2line(cmd: &str) -> bool {
    cmd.split_whitespace().take(2).any(|w| {
        std::path::Path::new(w)
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with("addr2line"))
    })
}

fn stderr_suffix(stderr: &str) -> String {
    let t = stderr.trim();
    if t.is_empty() {
        String::new()
    } else {
        format!(":\n{t}")
    }
}

/// The environment variable that sets how long a perf may make no progress before the
/// watchdog stops it, in seconds (default [`DEFAULT_STALL`]).
pub const STALL_ENV: &str = "PTSCOPE_PERF_STALL";

/// How long a perf may make no progress before it is stopped, unless [`STALL_ENV`] says.
/// Long enough for perf's slowest honest silence seen (reading a large DSO's symbols
/// spends CPU, which counts as progress), short against a user's patience.
pub const DEFAULT_STALL: Duration = Duration::from_secs(30);

/// How often the watchdog looks.
const WATCH_TICK: Duration = Duration::from_millis(250);

/// The stall limit from [`STALL_ENV`], else [`DEFAULT_STALL`].
pub fn stall_limit() -> Duration {
    std::env::var(STALL_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(DEFAULT_STALL, Duration::from_secs_f64)
}

/// perf's stdout as ptscope reads it: a read that waits says so, for the watchdog.
///
/// "No progress" is judged from ptscope's side: ptscope is waiting in a read of perf's
/// output (so a slow reader never makes perf look stuck), and perf itself spends no CPU
/// (so a perf busy unwinding or loading symbols is left alone). perf 6.1 decoding a
/// node recording sat so for over 10 minutes, waiting on its `addr2line -i` child.
#[derive(Debug)]
pub struct PerfOutput {
    inner: ChildStdout,
    watch: Arc<Watch>,
}

impl Read for PerfOutput {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.watch.waiting_since.store(
            self.watch.epoch.elapsed().as_nanos() as u64 | 1,
            Ordering::Relaxed,
        );
        let r = self.inner.read(buf);
        self.watch.waiting_since.store(0, Ordering::Relaxed);
        r
    }
}

impl std::os::fd::AsRawFd for PerfOutput {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.inner.as_raw_fd()
    }
}

/// How long perf made no progress, and the child it was waiting for (its command line
/// and CPU time), if any.
type Stall = (Duration, Option<(String, Duration)>);

/// What the reader and the watchdog of one perf share.
#[derive(Debug)]
struct Watch {
    epoch: Instant,
    /// When the current read began (ns since `epoch`, odd), 0 when not in a read.
    waiting_since: AtomicU64,
    /// perf was waited for (or is being): the watchdog ends.
    done: AtomicBool,
    /// Why the watchdog stopped perf.
    stalled: Mutex<Option<Stall>>,
    /// An interrupt asked perf to stop ([`stop_all`]): how it ends is no failure.
    interrupted: AtomicBool,
}

/// A running perf whose stdout the caller reads: its stderr is drained on a thread (only
/// the end kept, for error messages), a watchdog stops it when it makes no progress (see
/// [`PerfOutput`]), and it is killed, with any child of its own (`addr2line`), if dropped
/// before being waited for. Both decode paths (text and dlfilter) run perf through this.
#[derive(Debug)]
pub struct PerfProcess {
    child: Child,
    stderr: Option<JoinHandle<Vec<u8>>>,
    command: String,
    done: bool,
    watch: Arc<Watch>,
}

impl PerfProcess {
    /// Starts `cmd` with stdout and stderr piped; returns it and the stdout to read,
    /// watched with the stall limit of [`stall_limit`].
    pub fn spawn(cmd: &mut Command) -> Result<(PerfProcess, PerfOutput), PerfError> {
        Self::spawn_watched(cmd, stall_limit())
    }

    /// [`PerfProcess::spawn`] with an explicit stall limit.
    pub fn spawn_watched(
        cmd: &mut Command,
        limit: Duration,
    ) -> Result<(PerfProcess, PerfOutput), PerfError> {
        // Its own process group: a terminal's Ctrl-C reaches ptscope, whose policy decides
        // (stop decoding and keep what was read), not perf, whose death would read as a
        // failure. It still dies with ptscope, however ptscope ends.
        std::os::unix::process::CommandExt::process_group(cmd, 0);
        ptscope_interrupt::children::die_with_ptscope(cmd);
        // perf writes its inline and source-line queries to `addr2line` children, which
        // an interrupt's SIGINT to the group ends: with SIGPIPE at its default, a query
        // written just after killed perf before it wrote out its block-buffered output,
        // losing every sample it had decoded. Ignored, the write fails and perf goes on
        // to end as asked. Its stdout is read to the end or perf is killed (`Drop`), so
        // an EPIPE there cannot leave it running.
        // SAFETY: signal(2) is async-signal-safe, as pre_exec requires.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(cmd, || {
                if libc::signal(libc::SIGPIPE, libc::SIG_IGN) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
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
        let watch = Arc::new(Watch {
            epoch: Instant::now(),
            waiting_since: AtomicU64::new(0),
            done: AtomicBool::new(false),
            stalled: Mutex::new(None),
            interrupted: AtomicBool::new(false),
        });
        register(child.id(), Arc::clone(&watch));
        watchdog(child.id(), Arc::clone(&watch), limit);
        let process = PerfProcess {
            child,
            stderr: Some(keep_stderr_tail(stderr)),
            command,
            done: false,
            watch: Arc::clone(&watch),
        };
        Ok((
            process,
            PerfOutput {
                inner: stdout,
                watch,
            },
        ))
    }

    /// The error saying why the watchdog stopped perf, if it did.
    pub fn stall(&self) -> Option<PerfError> {
        let stalled = self
            .watch
            .stalled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        stalled.map(|(waited, waiting_for)| PerfError::Stalled {
            command: self.command.clone(),
            waited,
            waiting_for,
        })
    }

    /// True once an interrupt asked perf to stop ([`stop_all`]): its output ends early,
    /// and that is no failure.
    pub fn interrupted(&self) -> bool {
        self.watch.interrupted.load(Ordering::Relaxed)
    }

    /// Kills perf and its process group (its `addr2line` children with it).
    fn kill(&mut self) {
        kill_group(self.child.id());
        let _ = self.child.kill();
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
        self.watch.done.store(true, Ordering::Relaxed);
        unregister(self.child.id());
        if stopped_early {
            self.kill();
        }
        let status = self.child.wait().map_err(|source| PerfError::Wait {
            command: self.command.clone(),
            source,
        })?;
        let kept = self.take_stderr();
        if let Some(e) = self.stall() {
            return Err(e);
        }
        if status.success() || stopped_early || self.interrupted() {
            return Ok(());
        }
        Err(PerfError::Failed {
            command: self.command.clone(),
            status,
            stderr: tail(&kept),
        })
    }

    /// How perf exited, if it has (it is not waited for).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Stops perf and returns the end of its stderr (to explain why its output stopped).
    pub fn kill_and_stderr(&mut self) -> String {
        unregister(self.child.id());
        self.watch.done.store(true, Ordering::Relaxed);
        self.kill();
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
        self.watch.done.store(true, Ordering::Relaxed);
        if !self.done {
            unregister(self.child.id());
            self.kill();
            let _ = self.child.wait();
        }
    }
}

/// SIGKILL to the process group `pid` leads (perf is started as a group leader, so its
/// `addr2line` children go with it instead of running on orphaned).
fn kill_group(pid: u32) {
    signal_group(pid, libc::SIGKILL);
}

/// How long a perf the watchdog asked to end may take before it is killed.
const END_GRACE: Duration = Duration::from_secs(2);

/// Ends a stalled perf so that it cleans up after itself, else kills it. perf removes
/// its copy of the vDSO (`/tmp/perf-vdso.so-XXXXXX`, a path perf fixes, beyond
/// TMPDIR's reach) only when it ends by itself: a SIGKILL leaves one behind per run.
/// SIGCONT first, as a stopped perf acts on nothing else; the SIGINT then ends perf
/// script after the sample at hand, and kills an `addr2line` it waits on, which ends
/// the read perf is blocked in. A perf still there after [`END_GRACE`] (a hung file
/// system) is killed, with its children.
fn end_group(pid: u32) {
    signal_group(pid, libc::SIGCONT);
    signal_group(pid, libc::SIGINT);
    let deadline = Instant::now() + END_GRACE;
    while Instant::now() < deadline {
        if has_ended(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kill_group(pid);
}

/// Whether our child `pid` has ended (a zombie, not reaped yet, or gone).
fn has_ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat_fields(&stat).and_then(|f| f.first().copied()) == Some("Z"),
        Err(_) => true,
    }
}

/// Sends `signal` to the process group our child `pid` leads.
fn signal_group(pid: u32, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) of our own child's group; the child is not reaped yet, so its
        // pid (and the group's id) cannot have been reused.
        unsafe { libc::kill(-pid, signal) };
    }
}

/// CPU time (user + system) of a process, from `/proc/PID/stat`.
fn cpu_time(pid: u32) -> Option<Duration> {
    cpu_of_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The fields of a `/proc/PID/stat` after the command (state, ppid, …): the command may
/// hold spaces and parentheses, so they follow the last `)`.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    Some(stat[stat.rfind(')')? + 1..].split_whitespace().collect())
}

/// CPU time (user + system) in a `/proc/PID/stat`'s text.
fn cpu_of_stat(stat: &str) -> Option<Duration> {
    let f = stat_fields(stat)?;
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|&h| h > 0)
        .unwrap_or(100);
    Some(Duration::from_millis(ticks * 1000 / hz))
}

/// The children of `pid` (from every process's `/proc/PID/stat`), with their command
/// lines and CPU times, busiest first.
fn children_of(pid: u32) -> Vec<(String, Duration)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let ppid = stat_fields(&stat).and_then(|f| f.get(1)?.parse::<u32>().ok());
        if ppid != Some(pid) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
        let cmd = cmdline
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        out.push((cmd, cpu_of_stat(&stat).unwrap_or_default()));
    }
    out.sort_by_key(|c| std::cmp::Reverse(c.1));
    out
}

/// Watches one perf until it is waited for: when ptscope has waited in a read of its
/// output for `limit` while perf used under 5 % of that in CPU time, perf (and its
/// children) are ended ([`end_group`]) and the reason kept, for [`PerfProcess::stall`]. What a child
/// does is not progress: perf 6.1's `addr2line` on node's binary took about a second
/// of CPU per address, so perf printed a few bytes a minute (the decode would have
/// taken hours). Time is counted in the watchdog's own ticks, so a ptscope stopped by
/// a signal (Ctrl-Z) sees no stall.
fn watchdog(pid: u32, watch: Arc<Watch>, limit: Duration) {
    /// One stretch of waiting on perf without it progressing.
    struct Streak {
        /// The read it is about (its start, as `Watch::waiting_since` says).
        read: u64,
        /// perf's CPU time when it began.
        cpu: Duration,
        ticks: u32,
    }
    let spawned = std::thread::Builder::new()
        .name("ptscope-perf-watchdog".into())
        .spawn(move || {
            let mut streak: Option<Streak> = None;
            while !watch.done.load(Ordering::Relaxed) {
                std::thread::sleep(WATCH_TICK);
                let since = watch.waiting_since.load(Ordering::Relaxed);
                if since == 0 || watch.done.load(Ordering::Relaxed) {
                    streak = None;
                    continue;
                }
                // None once perf has exited: its output is about to end.
                let Some(cpu) = cpu_time(pid) else {
                    streak = None;
                    continue;
                };
                let s = match &mut streak {
                    Some(s) if s.read == since => s,
                    _ => streak.insert(Streak {
                        read: since,
                        cpu,
                        ticks: 0,
                    }),
                };
                s.ticks += 1;
                let window = WATCH_TICK * s.ticks;
                if cpu.saturating_sub(s.cpu) * 20 > window {
                    // perf is working: a new stretch starts now.
                    *s = Streak {
                        read: since,
                        cpu,
                        ticks: 0,
                    };
                    continue;
                }
                if window >= limit {
                    let waiting_for = children_of(pid).into_iter().next();
                    *watch.stalled.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some((window, waiting_for));
                    end_group(pid);
                    return;
                }
            }
        });
    // Without a thread there is no watchdog: perf runs unwatched, as before it existed.
    drop(spawned);
}

/// Running perf processes (pids, unregistered before they are reaped, so a pid here
/// is never a recycled one), with what their readers and watchdogs share.
static RUNNING: Mutex<Vec<(u32, Arc<Watch>)>> = Mutex::new(Vec::new());

fn register(pid: u32, watch: Arc<Watch>) {
    RUNNING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((pid, watch));
}

fn unregister(pid: u32) {
    RUNNING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(p, _)| *p != pid);
}

/// Asks every perf this process started that is still running to stop, as a decode
/// stopped by an interrupt must: SIGINT to its process group, which perf script answers
/// by ending after the sample at hand and writing out what it decoded (its output is
/// block-buffered: a SIGKILL would lose up to a buffer of decoded samples, with the
/// dlfilter all of a slow decode's first seconds). `addr2line` children die of it, so a
/// perf waiting on one goes on (perf ignores SIGPIPE: see
/// [`PerfProcess::spawn_watched`]). The readers then see their input end, and clean up
/// as usual; [`kill_all`] is for a perf that does not end.
pub fn stop_all() {
    for (pid, watch) in RUNNING.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        watch.interrupted.store(true, Ordering::Relaxed);
        signal_group(*pid, libc::SIGINT);
    }
}

/// Kills every perf this process started that is still running, with its children: a
/// perf that did not end after [`stop_all`] (stuck in a read of its own).
pub fn kill_all() {
    for (pid, watch) in RUNNING.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        watch.interrupted.store(true, Ordering::Relaxed);
        kill_group(*pid);
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

/// What a source decoding the perf.data at `input` through perf says about it: the
/// recording, the scope its (sampling) event asks for, and that perf's output is read
/// to its end after an interrupt ([`stop_all`]).
pub fn recording_info(input: &Path) -> ptscope_event::SourceInfo {
    let mut i = ptscope_event::SourceInfo::default();
    i.recording = Some(input.to_path_buf());
    i.drain_after_stop = true;
    i.scope = crate::header::read_header(input)
        .ok()
        .and_then(|h| h.scope());
    i
}

/// A running `perf script` whose stdout is decoded as it arrives.
///
/// Drain events with [`PerfScript::next_event`], then call [`PerfScript::finish`] to
/// learn whether perf succeeded; events decoded before a failure are never lost.
#[derive(Debug)]
pub struct PerfScript {
    decoder: Decoder<BufReader<PerfOutput>>,
    perf: PerfProcess,
    kind: RecordingKind,
    input: PathBuf,
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
            input: options.input.clone(),
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

    /// Why the watchdog stopped perf, if it did (its output then ended early).
    pub fn stall(&self) -> Option<PerfError> {
        self.perf.stall()
    }

    /// True once an interrupt asked perf to stop ([`stop_all`]).
    pub fn interrupted(&self) -> bool {
        self.perf.interrupted()
    }

    /// The next event from perf's output; `Ok(None)` when perf closed its output.
    pub fn next_event(&mut self) -> Result<Option<Event>, Error> {
        self.decoder.next_event()
    }

    /// The decoder (stats, warnings, strings).
    pub fn decoder(&self) -> &Decoder<BufReader<PerfOutput>> {
        &self.decoder
    }

    /// Mutable access to the decoder.
    pub fn decoder_mut(&mut self) -> &mut Decoder<BufReader<PerfOutput>> {
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
    fn info(&self) -> ptscope_event::SourceInfo {
        recording_info(&self.input)
    }
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

#[cfg(test)]
mod tests {
    use ptscope_event::EventSource;

    /// After an interrupt the pipeline reads a perf-driven source to its end (perf was
    /// asked to write out what it decoded) and stops a text source at once.
    #[test]
    fn only_a_perf_driven_source_is_drained_after_a_stop() {
        assert!(super::recording_info(std::path::Path::new("perf.data")).drain_after_stop);
        let text = crate::Decoder::new(std::io::Cursor::new(Vec::new()));
        assert!(!EventSource::info(&text).drain_after_stop);
    }
}
