//! The errors of a recording request that cannot work, as data.
//!
//! Messages say what is wrong in the recording's own terms and name no command-line
//! flag: the CLI knows its flags, and adds the advice in them when it prints
//! (`ptscope`'s `advice` module matches on these variants).

use std::path::PathBuf;

/// What a recording function returns.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A recording plan, trigger or backend that cannot work here.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The plan names no process.
    #[error("no process to record")]
    NoProcess,
    /// Custom Intel PT timing was asked of a sampling recording.
    #[error("custom PT timing does not apply to sampling")]
    CustomTimingWhenSampling,
    /// A sampling rate was asked of an Intel PT recording.
    #[error("a sampling rate (sample:FREQ) applies to sampling only")]
    SampleRateWithPt,
    /// An Intel PT snapshot was given as a duration.
    #[error("with Intel PT the snapshot is a trace buffer of a size, not a duration (`{secs}s`)")]
    SnapshotDurationWithPt {
        /// The duration given.
        secs: u32,
    },
    /// A snapshot duration was given for a recording of the whole execution.
    #[error(
        "a recording of the whole execution keeps everything: a snapshot duration does not apply"
    )]
    SnapshotDurationWithFullExecution,
    /// A snapshot duration was given for a recording of several snapshots.
    #[error("with several snapshots the sampling ring is bounded by a size, not a duration")]
    SnapshotDurationWithMultiSnapshot,
    /// A snapshot duration of 0 s.
    #[error("a snapshot duration must be at least 1 s")]
    ZeroSnapshotDuration,
    /// A snapshot size that is not a power of two of pages.
    #[error("the snapshot size must be a power of two of 4 KiB pages (got {pages} pages)")]
    SnapshotSizeNotPowerOfTwo {
        /// The size given, in pages.
        pages: u32,
    },
    /// Last-branch-record call stacks were asked of a machine without a hardware PMU.
    #[error(
        "last-branch-record call stacks need a hardware PMU with last-branch records, and \
         this machine has none"
    )]
    LbrWithoutPmu,
    /// Intel PT was asked for where it cannot record.
    #[error("{why}: an Intel PT recording cannot be made here")]
    NoIntelPt {
        /// Why not (no PT in this CPU, a VM without passthrough, …).
        why: String,
    },
    /// An empty trigger.
    #[error("a trigger needs a function name, an address, FILE:LINE or `.`")]
    EmptyTrigger,
    /// An `addr:` trigger that is not an address.
    #[error("trigger `{0}` is not an address (write 0x…)")]
    TriggerNotAnAddress(String),
    /// A `line:` trigger that is not `FILE:LINE[:COL]`.
    #[error("trigger `{0}` is not FILE:LINE[:COL]")]
    TriggerNotALine(String),
    /// A trigger's symbol could not be found in the process.
    #[error("trigger `{name}`: {reason}")]
    TriggerSymbol {
        /// The symbol.
        name: String,
        /// Why it was not found.
        reason: String,
    },
    /// The `.` trigger, in a program without ptscope's stop indicator.
    #[error(
        "{} has no `{function}` function for the stop-indicator trigger; link the \
         ptscope-stop-indicator crate or include ptscope.h and call {function}() where the \
         trace should end (in the executable or, once loaded, a shared library)",
        exe.display()
    )]
    NoStopIndicator {
        /// The program.
        exe: PathBuf,
        /// The function looked for.
        function: &'static str,
    },
    /// A `sample:FREQ` timer resolution whose frequency is not a positive number.
    #[error("`{0}`: the sampling frequency must be a positive number of Hz, e.g. sample:5000")]
    BadSampleFrequency(String),
    /// A `custom:` timing item that is not `KEY=VALUE`.
    #[error("`{pair}` in `{given}` is not KEY=VALUE")]
    TimingNotKeyValue {
        /// The item.
        pair: String,
        /// The whole timer resolution given.
        given: String,
    },
    /// A `custom:` timing value that is not a number.
    #[error("`{pair}` in `{given}`: the value must be a number")]
    TimingValueNotANumber {
        /// The item.
        pair: String,
        /// The whole timer resolution given.
        given: String,
    },
    /// A `custom:` timing key perf does not have.
    #[error(
        "`{key}` in `{given}` is not a PT timing setting; use cyc, cyc_thresh, mtc, \
         mtc_period, noretcomp or psb_period"
    )]
    UnknownTimingSetting {
        /// The key.
        key: String,
        /// The whole timer resolution given.
        given: String,
    },
    /// A timer resolution that is none of the known forms.
    #[error(
        "`{0}` is not a timer resolution; use low, normal, high, sample:FREQ or \
         custom:cyc=1,cyc_thresh=1,…"
    )]
    NotATimerResolution(String),
    /// A snapshot bound ending in `s` that is not whole seconds.
    #[error("`{0}` is not a duration in whole seconds; write e.g. 10s")]
    NotADuration(String),
    /// A snapshot size that is not a number with an optional unit.
    #[error("`{0}` is not a size; write e.g. 4M, 256K or 1024p (pages)")]
    NotASize(String),
    /// A snapshot size that is not a power of two of pages.
    #[error("`{0}` is not a power of two of 4 KiB pages; use e.g. 64K, 4M or 64M")]
    SizeNotPowerOfTwo(String),
    /// The perf binary could not be started.
    #[error(
        "cannot run {} ({source}); install perf (Debian: apt install linux-perf) or point \
         PTSCOPE_PERF at it",
        perf.display()
    )]
    CannotRunPerf {
        /// The perf binary.
        perf: PathBuf,
        /// Why it could not run.
        #[source]
        source: std::io::Error,
    },
    /// The perf binary's `--version` is not perf's.
    #[error(
        "`{} --version` printed {printed:?}, not `perf version X.Y`; is it really perf?",
        perf.display()
    )]
    NotPerf {
        /// The binary.
        perf: PathBuf,
        /// What it printed.
        printed: String,
    },
    /// Kernel tracing asked of a user who may not trace the kernel.
    #[error(
        "tracing the kernel needs root (you are uid {euid}); run ptscope as root, or set \
         PTSCOPE_PERF_IS_PRIVILEGED=1 if perf has the capabilities to do it"
    )]
    KernelNeedsRoot {
        /// The effective uid.
        euid: u32,
    },
    /// `perf_event_paranoid` forbids perf to everyone but root.
    #[error(
        "perf_event_paranoid is {paranoid} so only root may use perf; run as root or \
         `sysctl kernel.perf_event_paranoid=2`"
    )]
    ParanoidForbids {
        /// The setting.
        paranoid: i32,
    },
    /// A path that cannot be given to the kernel.
    #[error("{}: path contains a NUL byte", path.display())]
    PathHasNul {
        /// The path.
        path: PathBuf,
        /// Where the NUL is.
        #[source]
        source: std::ffi::NulError,
    },
    /// A control fifo could not be created.
    #[error("cannot create the control fifo {}: {source}", path.display())]
    CreateFifo {
        /// The fifo.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A control fifo could not be opened.
    #[error("cannot open the control fifo {}", path.display())]
    OpenFifo {
        /// The fifo.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A command could not be written to perf's control fifo.
    #[error("cannot write to perf's control fifo {}", path.display())]
    WriteFifo {
        /// The fifo.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// perf exited while a control command waited for its acknowledgement.
    #[error("perf exited before acknowledging `{command}`")]
    PerfExitedBeforeAck {
        /// The command (`snapshot`, `stop`, `ping`).
        command: &'static str,
    },
    /// perf did not acknowledge a control command in time.
    #[error("perf did not acknowledge `{command}` within {:.1} s", waited.as_secs_f64())]
    NoAck {
        /// The command.
        command: &'static str,
        /// How long it was given.
        waited: std::time::Duration,
    },
    /// A file could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file or directory could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be created.
    #[error("cannot create {}", path.display())]
    Create {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An old file in the way of a new one could not be removed.
    #[error("cannot replace {}", path.display())]
    Replace {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The working directory could not be created.
    #[error("cannot create the working directory {}", path.display())]
    CreateWorkingDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// perf's log could not be shared between its stdout and stderr.
    #[error("cannot duplicate the perf log")]
    DuplicatePerfLog(#[source] std::io::Error),
    /// A perf command line with no program.
    #[error("empty perf command line")]
    EmptyPerfCommand,
    /// A run with no command.
    #[error("no command to run")]
    NoCommand,
    /// A command named without a `/` that no directory of `PATH` holds.
    #[error("`{}` is not on PATH", .0.display())]
    NotOnPath(std::path::PathBuf),
    /// The program to run does not exist.
    #[error("cannot run `{}`: no such program{}", program.display(), run_hint(program))]
    NoSuchProgram {
        /// The program as given.
        program: PathBuf,
    },
    /// The program to run is not executable.
    #[error(
        "cannot run `{p}`: permission denied (is it executable? chmod +x {p})",
        p = program.display()
    )]
    ProgramNotExecutable {
        /// The program as given.
        program: PathBuf,
    },
    /// The program could not be started for another reason.
    #[error("cannot run `{}`: {source}", program.display())]
    CannotRun {
        /// The program as given.
        program: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The program ended before its first instruction.
    #[error("`{}` exited before it started", program.display())]
    ExitedBeforeStart {
        /// The program as given.
        program: PathBuf,
    },
    /// The stopped program could not be let go.
    #[error("cannot release process {pid}: {source}")]
    Release {
        /// The program's pid.
        pid: u32,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A ptrace step of running the program to its entry point failed.
    #[error("cannot {step} process {pid} to run it to its entry point: {source}")]
    RunToEntry {
        /// What could not be done (`read`, `resume`, …).
        step: &'static str,
        /// The program's pid.
        pid: u32,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The program ended while it ran to its entry point.
    #[error(
        "the program ended before its libraries were loaded{}",
        status.as_ref().map(|s| format!(" ({s})")).unwrap_or_default()
    )]
    EndedBeforeEntry {
        /// How it ended, when known (`exited with status 1`, …).
        status: Option<String>,
    },
    /// Running to the entry point is not implemented for this architecture.
    #[error(
        "finding functions in shared libraries before the program runs is only implemented \
         on x86-64"
    )]
    RunToEntryUnsupported,
    /// `/proc/PID/auxv` could not be read.
    #[error("cannot read the auxiliary vector of process {pid}")]
    Auxv {
        /// The process.
        pid: u32,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `/proc/PID/auxv` has no `AT_ENTRY`.
    #[error("process {pid} has no entry point in its auxiliary vector")]
    NoEntryPoint {
        /// The process.
        pid: u32,
    },
    /// The interrupt handler could not be installed.
    #[error("cannot install the Ctrl-C handler")]
    InstallInterrupt(#[source] std::io::Error),
    /// An attach request with no pid.
    #[error("no process to attach to")]
    NothingToAttach,
    /// An attach request for a pid that does not exist.
    #[error("there is no process with pid {pid} (it may have exited); list processes with `ps x`")]
    NoSuchPid {
        /// The pid.
        pid: u32,
    },
    /// An attach request for another user's process.
    #[error(
        "no permission to record process {pid}: it belongs to uid {owner} and you are uid \
         {euid}; run ptscope as root (sudo) to record other users' processes"
    )]
    NotPermittedToRecord {
        /// The pid.
        pid: u32,
        /// Its owner.
        owner: u32,
        /// The effective uid.
        euid: u32,
    },
    /// The program could not be run to its entry point to find a trigger in a library.
    #[error("looking for the trigger in the program's shared libraries")]
    TriggerInLibraries(#[source] Box<Error>),
    /// perf is no longer running.
    #[error("perf exited")]
    PerfExited,
    /// perf did not get to recording.
    #[error(
        "perf could not start recording ({cause}{}){log_tail}",
        status.as_ref().map(|s| format!("; it {s}")).unwrap_or_default()
    )]
    PerfDidNotStart {
        /// What showed it.
        #[source]
        cause: Box<Error>,
        /// How perf ended, when known.
        status: Option<String>,
        /// The end of perf's log (empty, or starting with a newline).
        log_tail: String,
    },
    /// perf ran but wrote no perf.data.
    #[error("perf wrote no data{log_tail}")]
    NoPerfData {
        /// The end of perf's log (empty, or starting with a newline).
        log_tail: String,
    },
    /// A control command to perf at the end of the recording failed.
    #[error("{during}")]
    EndingPerf {
        /// What was being done (`taking the snapshot`, `stopping perf`).
        during: &'static str,
        /// What went wrong.
        #[source]
        source: Box<Error>,
    },
    /// The process could not be read to place a trigger.
    #[error("cannot read process {pid} to place the trigger")]
    TriggerProcess {
        /// The process.
        pid: u32,
        /// Why.
        #[source]
        source: ptscope_symbols::Error,
    },
    /// The program could not be read to place a `FILE:LINE` trigger.
    #[error("cannot read {}", path.display())]
    TriggerProgram {
        /// The program.
        path: PathBuf,
        /// Why.
        #[source]
        source: ptscope_symbols::Error,
    },
    /// A `FILE:LINE` trigger that the program's debug information cannot place.
    #[error(transparent)]
    TriggerLine(#[from] ptscope_symbols::Error),
    /// The kernel refused a breakpoint.
    #[error(
        "cannot set a breakpoint on {name} at {address:#x} in process {pid}: {source}{}",
        breakpoint_hint(source)
    )]
    Breakpoint {
        /// The trigger's name.
        name: String,
        /// Its address.
        address: u64,
        /// The process.
        pid: u32,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },
    /// A breakpoint's sample ring could not be mapped.
    #[error("cannot map the breakpoint's sample ring: {0}")]
    BreakpointRing(#[source] std::io::Error),
    /// A breakpoint could not be enabled.
    #[error("cannot arm the breakpoint: {0}")]
    ArmBreakpoint(#[source] std::io::Error),
    /// A one-shot breakpoint could not be enabled again.
    #[error("cannot re-arm the breakpoint: {0}")]
    RearmBreakpoint(#[source] std::io::Error),
}

/// Why `perf_event_open` refuses a breakpoint, in words, for the errors it commonly gives.
fn breakpoint_hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => {
            " (not permitted: run as root or lower kernel.perf_event_paranoid)"
        }
        Some(libc::ENOSPC) => " (all hardware debug registers are in use)",
        Some(libc::ESRCH) => " (the process is gone)",
        Some(libc::EINVAL) => " (the address is not valid for a breakpoint)",
        _ => "",
    }
}

/// How to name a program that was not found: a bare name was looked up on PATH, so it
/// may have meant a file here; a path was taken as it is.
fn run_hint(program: &std::path::Path) -> String {
    if program.as_os_str().as_encoded_bytes().contains(&b'/') {
        String::new()
    } else {
        let p = program.display();
        format!(" (give a path like ./{p}, or a program on PATH)")
    }
}
