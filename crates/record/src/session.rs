//! One recording, start to end: capabilities, the program (started stopped or attached), perf,
//! the trigger, snapshots, and a clean stop whatever happens.

use crate::argv::{
    perf_record_argv, Backend, CallGraph, ControlChannel, RecordPlan, SnapshotWhen, TimerResolution,
};
use crate::caps::{process_owner, Capabilities};
use crate::control::{Command, ControlFifos};
use crate::process::{self, describe_exit, Perf, Program};
use crate::trigger::{self, Breakpoint, TriggerSpec};
use crate::{Error, Result};
use ptscope_event::{Hit, TraceScope};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// What to record.
#[derive(Clone, Debug)]
pub enum Target {
    /// Start this command (argv) and record it from its first instruction.
    Run(Vec<OsString>),
    /// Attach to these processes; the first is the head (trigger, executable).
    Attach(Vec<u32>),
}

/// Everything `run`/`attach` can be asked.
#[derive(Clone, Debug)]
pub struct Options {
    /// The perf binary.
    pub perf: PathBuf,
    /// What to record.
    pub target: Target,
    /// Where perf.data, hits and the log go.
    pub working_dir: PathBuf,
    /// Backend; `None` picks PT where it exists, else sampling.
    pub backend: Option<Backend>,
    /// User/kernel.
    pub scope: TraceScope,
    /// Timing.
    pub timer: TimerResolution,
    /// Only the given threads (`--per-thread -t`) rather than the whole process tree (`-p`).
    pub single_thread: bool,
    /// A snapshot per trigger hit.
    pub multi_snapshot: bool,
    /// No ring: record everything.
    pub full_execution: bool,
    /// Ring size in pages.
    pub snapshot_pages: Option<u32>,
    /// Sampling: keep the last this many seconds instead of a size.
    pub snapshot_seconds: Option<u32>,
    /// Sampling call stacks; `None` = dwarf.
    pub callgraph: Option<CallGraph>,
    /// The trigger.
    pub trigger: Option<TriggerSpec>,
    /// Use these capabilities instead of probing (tests with a stand-in perf).
    pub caps: Option<Capabilities>,
    /// No progress messages.
    pub quiet: bool,
    /// Where progress messages go (the library prints nothing itself); `None` drops them.
    pub say: Option<Say>,
}

/// A receiver of the session's progress messages ("recording PROG (pid N); Ctrl-C to
/// stop", notices about the plan): the caller decides how, and whether, to show them.
#[derive(Clone)]
pub struct Say(pub std::sync::Arc<dyn Fn(&str) + Send + Sync>);

impl Say {
    /// Messages handed to `f`.
    pub fn new(f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        Say(std::sync::Arc::new(f))
    }
}

impl std::fmt::Debug for Say {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Say(..)")
    }
}

/// Why recording ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// The trigger fired (single snapshot).
    Trigger,
    /// Ctrl-C or another signal.
    Signal(i32),
    /// Every recorded process exited.
    ProgramExited,
    /// perf stopped by itself while the program still ran (what it wrote is kept).
    PerfStopped(ExitStatus),
}

/// What a recording produced.
#[derive(Debug)]
pub struct Outcome {
    /// The backend used.
    pub backend: Backend,
    /// Recorded pids (head first).
    pub pids: Vec<u32>,
    /// Trigger hits, in order.
    pub hits: Vec<Hit>,
    /// perf.data files, one per snapshot, in order.
    pub perf_files: Vec<PathBuf>,
    /// Why it ended.
    pub ended_by: EndReason,
    /// How the program ended (`run` only, if it did).
    pub program_status: Option<ExitStatus>,
    /// The head process's command line (for track names).
    pub command: Option<String>,
    /// The head process's executable (for source positions when decoding).
    pub exe: Option<PathBuf>,
    /// What the user should know about the recording (perf lost data, perf stopped early).
    pub warnings: Vec<String>,
}

/// Present in a working directory whose perf.data files are consecutive pieces of one
/// sampling recording (the flight recorder's rotation), to be decoded as one.
pub const ROTATED_FILES_MARKER: &str = "rotated-perf-data";

fn say(opts: &Options, msg: &str) {
    if let (false, Some(say)) = (opts.quiet, &opts.say) {
        (say.0)(msg);
    }
}

/// perf's log, last lines, indented for an error message.
fn perf_log_tail(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("perf.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &lines[lines.len().saturating_sub(8)..];
    if tail.is_empty() {
        String::new()
    } else {
        format!("\nperf said:\n  {}", tail.join("\n  "))
    }
}

/// What perf's log says was lost, each with what to do about it.
///
/// perf prints `Processed N events and lost M chunks!` when its ring buffer overflowed
/// (the disk or the CPU could not keep up) and `lost N samples` for dropped samples.
pub fn perf_log_warnings(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("perf.log")).unwrap_or_default();
    lost_data_warnings(&text)
}

/// [`perf_log_warnings`] on the log's text.
pub fn lost_data_warnings(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        let lower = line.to_ascii_lowercase();
        if !lower.contains("lost") || !lower.chars().any(|c| c.is_ascii_digit()) {
            continue;
        }
        let advice = if lower.contains("chunk") {
            "perf's buffer overflowed because writing the recording could not keep up; \
             parts of the trace are missing. Record less (a shorter run, --callgraph fp \
             instead of dwarf, a lower --timer-resolution, a sampling flight recorder \
             instead of --full-execution) or, with Intel PT, give perf a larger buffer \
             (--snapshot-size)"
        } else {
            "some samples were dropped, so the trace has gaps; a lower \
             --timer-resolution or --callgraph fp makes each sample cheaper"
        };
        out.push(format!("perf reported: \"{line}\": {advice}"));
    }
    out
}

/// perf's control: fifos when perf has `--control`, signals otherwise.
struct Controller {
    fifos: Option<ControlFifos>,
    snapshot_at_exit: bool,
}

impl Controller {
    fn send(&mut self, perf: &mut Perf, cmd: Command) -> Result<()> {
        match &mut self.fifos {
            Some(f) => f.send(cmd, Duration::from_secs(8), || perf.alive()),
            None => {
                let sig = match cmd {
                    Command::Snapshot => libc::SIGUSR2,
                    Command::Ping => return Ok(()),
                    // perf ≥ 5.4 snapshots at SIGINT with --snapshot=e; older ones stop on SIGTERM.
                    Command::Stop if self.snapshot_at_exit => libc::SIGINT,
                    Command::Stop => libc::SIGTERM,
                };
                perf.signal(sig);
                Ok(())
            }
        }
    }
}

/// Records according to `opts`. Whatever happens, perf and a started program are not left
/// running, and the control fifos are removed.
///
/// Recording ends at the first interrupt (Ctrl-C, SIGTERM or SIGHUP, counted by
/// `ptscope_interrupt`) after the call; later presses are the caller's to interpret.
pub fn record(opts: &Options) -> Result<Outcome> {
    ptscope_interrupt::install().map_err(Error::InstallInterrupt)?;
    let base = ptscope_interrupt::presses();
    record_inner(opts, base)
}

/// The signal of a press after `base`, and whether it was aimed at ptscope alone.
fn pressed_since(base: usize) -> Option<(i32, bool)> {
    (ptscope_interrupt::presses() > base)
        .then(|| ptscope_interrupt::last_press().unwrap_or((libc::SIGINT, false)))
}

fn record_inner(opts: &Options, base: usize) -> Result<Outcome> {
    let caps = match &opts.caps {
        Some(c) => c.clone(),
        None => Capabilities::detect(&opts.perf)?,
    };
    let backend = match (opts.backend, &caps.intel_pt) {
        (Some(Backend::Pt), None) => {
            return Err(Error::NoIntelPt {
                why: caps.why_no_pt(),
            })
        }
        (Some(b), _) => b,
        (None, Some(_)) => Backend::Pt,
        (None, None) => {
            say(
                opts,
                &format!(
                    "{}; sampling with {} and call stacks instead (`--backend emulate` shows \
                     every call exactly, running the program under qemu-user)",
                    caps.why_no_pt(),
                    if caps.hardware_pmu {
                        "cycles"
                    } else {
                        "cpu-clock"
                    }
                ),
            );
            Backend::Sample
        }
    };
    caps.check_may_record(opts.scope.includes_kernel())?;
    std::fs::create_dir_all(&opts.working_dir).map_err(|source| Error::CreateWorkingDir {
        path: opts.working_dir.clone(),
        source,
    })?;
    let dir = &opts.working_dir;

    let mut program = None;
    let pids = match &opts.target {
        Target::Run(argv) => {
            let p = Program::spawn_stopped(argv)?;
            let pid = p.pid();
            program = Some(p);
            vec![pid]
        }
        Target::Attach(pids) => {
            if pids.is_empty() {
                return Err(Error::NothingToAttach);
            }
            for &pid in pids {
                let Some(owner) = process_owner(pid).filter(|_| process::pid_alive(pid)) else {
                    return Err(Error::NoSuchPid { pid });
                };
                if caps.euid != 0 && owner != caps.euid {
                    return Err(Error::NotPermittedToRecord {
                        pid,
                        owner,
                        euid: caps.euid,
                    });
                }
            }
            pids.clone()
        }
    };
    let head = pids[0];
    let command = process::cmdline(head);
    let exe = std::fs::read_link(format!("/proc/{head}/exe")).ok();

    let targets = match &opts.trigger {
        Some(spec) => match (trigger::resolve(spec, head), program.as_mut()) {
            (Ok(t), _) => t,
            // At exec only the executable is mapped: a function in a shared library
            // is found once the dynamic loader has mapped them all.
            (Err(_), Some(p))
                if matches!(
                    spec,
                    trigger::TriggerSpec::Symbol(_) | trigger::TriggerSpec::StopIndicator
                ) =>
            {
                p.run_to_entry()
                    .map_err(|e| Error::TriggerInLibraries(Box::new(e)))?;
                let t = trigger::resolve(spec, head)?;
                say(
                    opts,
                    "the trigger is in a shared library: the program ran its dynamic loader \
                     (and library constructors) before recording started",
                );
                t
            }
            (Err(e), _) => return Err(e),
        },
        None => Vec::new(),
    };

    let fifos = if caps.perf_version.control() {
        Some(ControlFifos::create(dir)?)
    } else {
        None
    };
    let mut plan = RecordPlan::new(&opts.perf, dir.join("perf.data"), pids.clone());
    plan.backend = backend;
    plan.scope = opts.scope;
    plan.timer = opts.timer;
    plan.single_thread = opts.single_thread;
    plan.multi_snapshot = opts.multi_snapshot;
    plan.full_execution = opts.full_execution;
    plan.snapshot_when = if targets.is_empty() {
        SnapshotWhen::AtExit
    } else {
        SnapshotWhen::OnTrigger
    };
    plan.snapshot_pages = opts.snapshot_pages;
    plan.snapshot_seconds = opts.snapshot_seconds;
    plan.callgraph = opts.callgraph.unwrap_or(CallGraph::Dwarf);
    plan.control = match &fifos {
        Some(f) => ControlChannel::Fifo {
            ctl: f.ctl_path().to_owned(),
            ack: f.ack_path().to_owned(),
        },
        None => ControlChannel::Signals,
    };
    plan.snapshot_at_exit = caps.perf_version.snapshot_at_exit();
    plan.kcore = caps.perf_version.kcore();
    plan.buildid_mmap = caps.perf_version.buildid_mmap();
    plan.psb_cyc = caps.intel_pt.as_ref().is_some_and(|c| c.psb_cyc);
    plan.hardware_pmu = caps.hardware_pmu;
    plan.switch_stacks = caps.switch_stacks();
    plan.max_sample_rate = caps.max_sample_rate.unwrap_or(100_000);
    plan.validate()?;
    for n in plan.notices() {
        say(opts, &n);
    }
    if backend == Backend::Sample && !plan.switch_stacks {
        say(
            opts,
            "time off CPU is shown inside the frames the samples around it share, without \
             the function the thread waited in: recording the stack at each switch out of the \
             CPU needs root (or perf_event_paranoid -1) and the sched:sched_switch tracepoint \
             (tracefs mounted)",
        );
    }
    // A previous recording in a reused working directory must not be decoded with this one.
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("perf.data")
            || name == crate::hits::FILE_NAME
            || name == ROTATED_FILES_MARKER
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
    if plan.rotates() || plan.snapshot_ring().is_some() {
        // The perf.data files will be one recording cut in pieces, not snapshots (with
        // --multi-snapshot, except where the marker says a snapshot ends).
        process::create_private(&dir.join(ROTATED_FILES_MARKER))?;
    }
    let mut ring = plan
        .ring()
        .map(|(piece, keep)| crate::ring::SnapshotRing::new(dir, piece, keep));
    // With --multi-snapshot a hit seals the pieces held; otherwise the ring only rotates.
    let sealing = plan.snapshot_ring().is_some();
    let argv = perf_record_argv(&plan);
    if std::env::var_os("PTSCOPE_PRINT_PERF_COMMANDS").is_some() {
        let line = argv
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        // Asked for explicitly: not held back by `quiet` (the receiver decides).
        if let Some(say) = &opts.say {
            (say.0)(&line);
        }
    }
    let mut perf = Perf::spawn(&argv, &dir.join("perf.log"))?;
    let mut ctl = Controller {
        fifos,
        snapshot_at_exit: plan.snapshot_at_exit,
    };

    // perf answers `ping` only once its events are enabled: then the program may run.
    let ready = match ctl.fifos.is_some() {
        true => ctl.send(&mut perf, Command::Ping),
        false => {
            std::thread::sleep(Duration::from_millis(500));
            Ok(())
        }
    };
    if let Err(e) = ready.and_then(|_| {
        if perf.alive() {
            Ok(())
        } else {
            Err(Error::PerfExited)
        }
    }) {
        let status = perf.finish(Duration::from_secs(2));
        return Err(Error::PerfDidNotStart {
            cause: Box::new(e),
            status: status.map(describe_exit),
            log_tail: perf_log_tail(dir),
        });
    }

    let once = !opts.multi_snapshot;
    let mut bps = Vec::new();
    for t in &targets {
        bps.push(Breakpoint::open(head, t.clone(), once)?);
    }
    let offset = if targets.iter().any(|t| t.is_stop_indicator) {
        trigger::monotonic_to_perf_offset()
    } else {
        None
    };

    match &program {
        Some(_) => say(
            opts,
            &format!(
                "recording {} (pid {head}){}; Ctrl-C to stop",
                command.as_deref().unwrap_or("the program"),
                trigger_note(&targets)
            ),
        ),
        None => say(
            opts,
            &format!(
                "attached to {} (pid {}){}; Ctrl-C to stop and keep the last moments",
                command.as_deref().unwrap_or("the process"),
                pids.iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                trigger_note(&targets)
            ),
        ),
    }
    if let Some(p) = program.as_mut() {
        p.release()?;
    }

    let mut hits = Vec::new();
    let ended_by = loop {
        if let Some((sig, to_us)) = pressed_since(base) {
            if to_us {
                if let Some(p) = &program {
                    p.signal(sig);
                }
            }
            break EndReason::Signal(sig);
        }
        let before = hits.len();
        if read_hits(&mut bps, offset, &mut hits) {
            if let Some(r) = ring.as_mut().filter(|_| sealing) {
                // Sampling: the hit's rotation ends the pieces held, which become its
                // snapshot (see `crate::ring`).
                if seal_snapshot(r, &mut perf, dir)? {
                    say_snapshots(opts, before, &hits);
                } else {
                    say(
                        opts,
                        "trigger hit, but perf did not start a new file in time: the moments \
                         before it stay in the next snapshot",
                    );
                }
            } else if opts.multi_snapshot {
                // SIGUSR2 both snapshots and switches to a new perf.data file.
                perf.signal(libc::SIGUSR2);
                say_snapshots(opts, before, &hits);
            } else {
                // Hold the process still so the recording ends at the hit, not a few ms later.
                for &p in &pids {
                    // SAFETY: plain kill(2).
                    unsafe { libc::kill(p as libc::pid_t, libc::SIGSTOP) };
                }
                break EndReason::Trigger;
            }
        }
        let gone = match program.as_mut() {
            Some(p) => p.try_wait().is_some(),
            None => pids.iter().all(|&p| !process::pid_alive(p)),
        };
        if gone {
            break EndReason::ProgramExited;
        }
        if let Some(s) = perf.try_wait() {
            // perf also ends by itself when the program does (an abort, say) and may be
            // seen first: give the program a moment to be reaped before judging.
            let program_gone = match program.as_mut() {
                Some(p) => p.wait_timeout(Duration::from_millis(300)).is_some(),
                None => pids.iter().all(|&p| !process::pid_alive(p)),
            };
            if program_gone {
                break EndReason::ProgramExited;
            }
            // What perf wrote before it stopped is still worth decoding.
            break EndReason::PerfStopped(s);
        }
        if ring.as_mut().is_some_and(|r| r.poll()) {
            perf.signal(libc::SIGUSR2);
        }
        wait_for(&bps, Duration::from_millis(20));
    };

    // Hits the loop had no turn to see (the program hit the trigger, then exited while
    // a rotation was being waited for): each is a snapshot too, sealed while perf runs.
    let before = hits.len();
    if ended_by != EndReason::Trigger && read_hits(&mut bps, offset, &mut hits) {
        if let Some(r) = ring.as_mut().filter(|_| sealing && perf.alive()) {
            seal_snapshot(r, &mut perf, dir)?;
        }
        if opts.multi_snapshot {
            say_snapshots(opts, before, &hits);
        }
    }
    let finish = finish_perf(&mut ctl, &mut perf, backend, &plan, ended_by);
    if ended_by == EndReason::Trigger {
        for &p in &pids {
            // SAFETY: plain kill(2).
            unsafe { libc::kill(p as libc::pid_t, libc::SIGCONT) };
        }
    }
    drop(bps);
    drop(ctl);
    let perf_status = perf.finish(Duration::from_secs(30));
    if let Some(r) = ring.as_mut() {
        r.finish();
    }
    finish?;
    let mut warnings = perf_log_warnings(dir);
    if let EndReason::PerfStopped(s) = ended_by {
        warnings.push(format!(
            "perf stopped while the program was still running: it {}; the trace holds what \
             it recorded until then{}",
            describe_exit(s),
            perf_log_tail(dir)
        ));
    } else {
        match perf_status {
            Some(s) if s.success() => {}
            // perf ends on SIGINT/SIGTERM when signalled (old perf): that is a normal end.
            Some(s)
                if s.code().is_none()
                    && matches!(
                        std::os::unix::process::ExitStatusExt::signal(&s),
                        Some(libc::SIGINT | libc::SIGTERM)
                    ) => {}
            // What it wrote may still decode; "no data" is decided below.
            Some(s) => warnings.push(format!(
                "perf {} while finishing the recording; decoding what it wrote{}",
                describe_exit(s),
                perf_log_tail(dir)
            )),
            None => warnings.push("lost track of perf while it finished the recording".into()),
        }
    }

    let mut program_status = None;
    if let Some(p) = program.as_mut() {
        program_status = match ended_by {
            EndReason::ProgramExited => p.try_wait(),
            // The program runs on to its natural end after a trigger; a signal ends it.
            EndReason::Trigger => {
                say(
                    opts,
                    "snapshot taken; waiting for the program to exit (Ctrl-C to stop it)",
                );
                wait_program(p, ptscope_interrupt::presses())
            }
            EndReason::Signal(_) | EndReason::PerfStopped(_) => {
                let s = p.wait_timeout(Duration::from_millis(500));
                if s.is_none() {
                    p.signal(libc::SIGTERM);
                }
                p.wait_timeout(Duration::from_secs(2)).or_else(|| {
                    p.kill();
                    p.try_wait()
                })
            }
        };
    }
    crate::hits::write(dir, &hits)?;
    let mut perf_files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| Error::Read {
            path: dir.clone(),
            source,
        })?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("perf.data") && !n.ends_with(".old"))
        })
        .collect();
    perf_files.sort();
    if perf_files.is_empty() {
        return Err(Error::NoPerfData {
            log_tail: perf_log_tail(dir),
        });
    }
    Ok(Outcome {
        backend,
        pids,
        hits,
        perf_files,
        ended_by,
        program_status,
        command,
        exe,
        warnings,
    })
}

/// Takes the hits every breakpoint recorded since the last call into `hits`; true if
/// there were any. `offset` maps a stop indicator's CLOCK_MONOTONIC argument onto perf's
/// clock.
fn read_hits(bps: &mut [Breakpoint], offset: Option<i64>, hits: &mut Vec<Hit>) -> bool {
    let before = hits.len();
    for bp in bps {
        for h in bp.read_hits() {
            hits.push(Hit {
                symbol: bp.target.name.clone(),
                time: h.time,
                tid: h.tid,
                ip: h.ip,
                passed_time: if bp.target.is_stop_indicator {
                    offset.map_or(0, |o| (h.di as i64).wrapping_add(o) as u64)
                } else {
                    0
                },
                passed_value: h.si as i64,
                is_stop_indicator: bp.target.is_stop_indicator,
            });
        }
    }
    hits.len() > before
}

fn trigger_note(targets: &[trigger::Target]) -> String {
    match targets {
        [] => String::new(),
        [t] => format!(", trigger on {} at {:#x}", t.name, t.address),
        ts => format!(", trigger on {} places", ts.len()),
    }
}

/// Waits for the program; a Ctrl-C (or SIGTERM) meanwhile is passed on.
fn wait_program(p: &mut Program, base: usize) -> Option<ExitStatus> {
    loop {
        if let Some(s) = p.try_wait() {
            return Some(s);
        }
        if let Some((sig, to_us)) = pressed_since(base) {
            if to_us || sig != libc::SIGINT {
                p.signal(sig);
            }
            return p.wait_timeout(Duration::from_secs(2)).or_else(|| {
                p.kill();
                p.try_wait()
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Ends a sampling snapshot at a trigger hit: perf's rotation ends the pieces held
/// (see `crate::ring`), and the rotation marker says so. False if perf did not start a
/// new file in time.
fn seal_snapshot(r: &mut crate::ring::SnapshotRing, perf: &mut Perf, dir: &Path) -> Result<bool> {
    r.settle();
    perf.signal(libc::SIGUSR2);
    let sealed = r.seal();
    if sealed {
        write_snapshot_ends(dir, r.snapshot_ends())?;
    }
    Ok(sealed)
}

/// Says each hit after the first `before` of `hits`: each is a snapshot of its own
/// (`ptscope decode` cuts them at the hits' times), however close together they came.
fn say_snapshots(opts: &Options, before: usize, hits: &[Hit]) {
    for k in before + 1..=hits.len() {
        say(opts, &format!("trigger hit: snapshot {k}"));
    }
}

/// Rewrites the rotation marker with the files that end a snapshot, one name per line.
fn write_snapshot_ends(dir: &Path, ends: &[std::ffi::OsString]) -> Result<()> {
    let mut text = String::new();
    for e in ends {
        text.push_str(&e.to_string_lossy());
        text.push('\n');
    }
    let path = dir.join(ROTATED_FILES_MARKER);
    process::create_private(&path)?
        .write_all(text.as_bytes())
        .map_err(|source| Error::Write { path, source })
}

fn wait_for(bps: &[Breakpoint], timeout: Duration) {
    if bps.is_empty() {
        std::thread::sleep(timeout);
        return;
    }
    let mut fds: Vec<libc::pollfd> = bps
        .iter()
        .map(|b| libc::pollfd {
            fd: b.fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: valid pollfd array.
    unsafe {
        libc::poll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            timeout.as_millis() as i32,
        )
    };
}

/// Takes the final snapshot if one is due and stops perf.
fn finish_perf(
    ctl: &mut Controller,
    perf: &mut Perf,
    backend: Backend,
    plan: &RecordPlan,
    ended_by: EndReason,
) -> Result<()> {
    if !perf.alive() {
        return Ok(());
    }
    let start = Instant::now();
    let snapshot_first = backend == Backend::Pt
        && plan.uses_snapshot_ring()
        && !plan.multi_snapshot
        && (ended_by == EndReason::Trigger || !plan.snapshot_at_exit);
    if snapshot_first {
        if let Err(e) = ctl.send(perf, Command::Snapshot) {
            if perf.alive() {
                return Err(Error::EndingPerf {
                    during: "taking the snapshot",
                    source: Box::new(e),
                });
            }
        }
    }
    if let Err(e) = ctl.send(perf, Command::Stop) {
        // perf may have exited by itself as the program ended, before reading `stop`.
        if perf.alive() && start.elapsed() > Duration::from_secs(1) {
            return Err(Error::EndingPerf {
                during: "stopping perf",
                source: Box::new(e),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::lost_data_warnings;

    /// What perf 6.1 printed here when a `--call-graph dwarf` recording outran its buffer
    /// (defect 9: this was only in a perf.log that was then deleted).
    #[test]
    fn lost_chunks_and_samples_become_advice() {
        let log = "[ perf record: Woken up 3 times to write data ]\n\
                   Warning:\n\
                   Processed 17342 events and lost 12 chunks!\n\n\
                   Check IO/CPU overload!\n\n\
                   [ perf record: Captured and wrote 74.093 MB perf.data (8997 samples) ]\n";
        let w = lost_data_warnings(log);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("lost 12 chunks"));
        assert!(w[0].contains("--callgraph fp"));
        let w = lost_data_warnings("Warning:\n2 lost samples\n");
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("dropped"));
        // An ordinary log says nothing.
        assert!(lost_data_warnings(
            "[ perf record: Woken up 1 times to write data ]\n\
             [ perf record: Captured and wrote 0.021 MB perf.data (93 samples) ]\n"
        )
        .is_empty());
    }
}
