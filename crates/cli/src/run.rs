//! `ptscope run` and `ptscope attach`: record with perf, then decode the working directory
//! exactly as `ptscope decode DIR` does.

use crate::decode::{self, DecoderKind};
use crate::messages;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use ptscope_event::TraceScope;
use ptscope_pipeline::{DecodeOptions, Input};
use ptscope_record::argv::{
    parse_snapshot_bound, Backend, CallGraph, SnapshotBound, TimerResolution,
};
use ptscope_record::process::describe_exit;
use ptscope_record::session::{self, EndReason, Options, Target};
use ptscope_record::trigger::TriggerSpec;
use std::ffi::OsString;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

/// Recording backends.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// Intel Processor Trace (every call and return).
    Pt,
    /// Timer sampling with call stacks (works everywhere).
    Sample,
    /// Run the program under qemu-user with ptscope's plugin: every call and return,
    /// exactly, without Intel PT (user space only; much slower than native).
    Emulate,
}

/// Sampling call-stack methods.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum CallGraphArg {
    /// Frame pointers (programs built with -fno-omit-frame-pointer).
    Fp,
    /// DWARF unwinding (any program with unwind tables; heavier).
    Dwarf,
    /// Last-branch records (Intel hardware).
    Lbr,
}

/// Options shared by `run` and `attach`.
#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Snapshot when this runs: a function (raw or demangled), 0xADDR, FILE:LINE\[:COL\],
    /// `.` (ptscope_stop_indicator) or `?` (pick a function). Default: at Ctrl-C or exit.
    #[arg(long, value_name = "WHERE")]
    pub trigger: Option<String>,
    /// Take a snapshot at every trigger hit (each its own snapshot in the trace).
    #[arg(long)]
    pub multi_snapshot: bool,
    /// How much of the last moments to keep. PT: the trace buffer per CPU, a power of two
    /// (e.g. 4M, 256K). Sampling: the disk they may take (default 256M; with
    /// --multi-snapshot, perf's sample buffer), or how long they last, in seconds (e.g. 10s).
    #[arg(long, value_name = "SIZE|SECONDS")]
    pub snapshot_size: Option<String>,
    /// low, normal, high, sample:FREQ (Hz) or custom:cyc=1,cyc_thresh=1,mtc_period=0,….
    #[arg(long, value_name = "RES", default_value = "normal")]
    pub timer_resolution: String,
    /// Record the kernel too (needs root).
    #[arg(long, conflicts_with = "kernel_only")]
    pub trace_include_kernel: bool,
    /// Record only the kernel (needs root).
    #[arg(long)]
    pub kernel_only: bool,
    /// Record only the given threads: no other threads, no child processes.
    /// Default: the whole process tree (every thread, fork and exec).
    #[arg(long, conflicts_with = "multi_thread")]
    pub single_thread: bool,
    /// The default (every thread, fork and exec); kept for scripts written for magic-trace.
    #[arg(long, hide = true)]
    pub multi_thread: bool,
    /// Record everything from start to end instead of the last moments (large!).
    #[arg(long)]
    pub full_execution: bool,
    /// Keep only what happens between calls to START and returns from STOP.
    #[arg(long, value_name = "START,STOP")]
    pub filter: Option<String>,
    /// With --backend emulate, the clock of the trace's times: `host` (default: real
    /// time, emulation slowdown included) or `virtual` (1 guest instruction = 1 ns, plus
    /// the real time spent in syscalls).
    #[arg(long, value_enum, value_name = "CLOCK")]
    pub clock: Option<decode::ClockArg>,
    /// pt, sample or emulate; default: pt where the CPU has Intel PT, else sample.
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// How sampling gets call stacks (default dwarf).
    #[arg(long, value_enum)]
    pub callgraph: Option<CallGraphArg>,
    /// Where to write the trace (`.fxt.gz` gzipped, `.fxt` raw).
    #[arg(short, long, value_name = "FILE", default_value = "trace.fxt.gz")]
    pub output: PathBuf,
    /// Keep the recording here (`ptscope decode DIR` decodes it again); default: a temporary
    /// directory, removed afterwards.
    #[arg(short = 'w', long, value_name = "DIR")]
    pub working_directory: Option<PathBuf>,
    /// The perf binary (default: `$PTSCOPE_PERF`, else `perf` on PATH).
    #[arg(long, value_name = "PATH")]
    pub perf: Option<PathBuf>,
    /// Record only; do not decode (the recording is kept; `ptscope decode DIR` decodes it).
    #[arg(long)]
    pub no_decode: bool,
    /// How to read the recording: ptscope's own Intel PT decoder (`builtin`), perf
    /// through ptscope's dlfilter, `perf script` text; `auto`: builtin for Intel PT
    /// (perf's path with a notice when it cannot), else the dlfilter when perf supports
    /// it, falling back to text with a notice.
    #[arg(long, value_enum, default_value_t = DecoderKind::Auto)]
    pub decoder: DecoderKind,
    /// No progress bar and no informational messages (warnings and errors still show).
    #[arg(short, long)]
    pub quiet: bool,
    /// What of the trace to keep.
    #[command(flatten)]
    pub shape: decode::ShapeArgs,
    #[command(flatten)]
    pub after: crate::view::AfterFlags,
}

/// Arguments of `ptscope run`.
#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  ptscope run -- ./server --port 8080          # snapshot at Ctrl-C or when it exits
  ptscope run --trigger handle_timeout -- ./server   # snapshot when handle_timeout runs
  ptscope run --trigger . -- ./server          # snapshot at ptscope_stop_indicator()
  ptscope run --trigger src/main.rs:120 -w rec -- ./server   # keep the recording in rec/
  ptscope decode rec -o again.fxt.gz            # decode a kept recording again

Without Intel PT (AMD, most VMs) ptscope samples call stacks instead and says so:
the trace keeps the last 256 MiB of samples (`--snapshot-size 64M` or `--snapshot-size
10s` for the last 10 seconds), shows time off CPU as [off-cpu] and time in system calls
as [kernel: read]-style frames under their callers. `--backend emulate` shows every call
exactly by running the program under qemu-user.
Open the trace at https://ui.perfetto.dev: `--view` serves it to the UI once written
(as `ptscope view` does); `--report` prints `ptscope report`'s summary.

Ctrl-C (or SIGTERM/SIGHUP): the first stops recording and decodes; the second stops
decoding and writes what was decoded; the third quits, keeping the recording and printing
the `ptscope decode DIR` command. The trace appears at -o only once written whole.
Exit status: the program's own when it failed (128+N if killed by signal N), else 0, or
1 when ptscope failed or the trace is incomplete, 130 when decoding was interrupted.")]
pub struct RunArgs {
    #[command(flatten)]
    pub common: RecordArgs,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Arguments of `ptscope attach`.
#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  ptscope attach -p 1234                 # Ctrl-C to stop: the trace shows the last moments
  ptscope attach -p 1234,1240             # two processes, with their threads and children
  ptscope attach -p 1234 --single-thread  # only thread 1234
  ptscope attach -p 1234 --trigger my_slow_path
  ptscope attach                         # pick a process interactively

Open the trace at https://ui.perfetto.dev.")]
pub struct AttachArgs {
    /// Process ids (comma-separated); omitted: pick one interactively.
    #[arg(short, long, value_name = "PID[,PID…]", value_delimiter = ',')]
    pub pid: Vec<u32>,
    #[command(flatten)]
    pub common: RecordArgs,
}

/// Runs `ptscope run`.
pub fn run(args: RunArgs) -> Result<i32> {
    record_and_decode(&args.common, Target::Run(args.command))
}

/// Runs `ptscope attach`.
pub fn attach(args: AttachArgs) -> Result<i32> {
    messages::set_quiet(args.common.quiet);
    let pids = if args.pid.is_empty() {
        vec![pick_process()?]
    } else {
        args.pid
    };
    record_and_decode(&args.common, Target::Attach(pids))
}

/// Fails now, before anything runs, if the trace could not be written at `output`: a
/// whole recording must not be made only to be lost to a missing directory.
fn check_output(output: &Path) -> Result<()> {
    if output == Path::new("-") {
        return Ok(());
    }
    if std::fs::symlink_metadata(output).is_ok_and(|m| m.is_dir()) {
        bail!(
            "cannot write the trace to {}: it is a directory; give a file name, e.g. -o {}",
            output.display(),
            output.join("trace.fxt.gz").display()
        );
    }
    // Never through a link, never into a device or fifo: a trace is a regular file.
    ptscope_rootsafe::check_output_target(output)
        .map_err(|e| anyhow::anyhow!("cannot write the trace: {e}; nothing was recorded"))?;
    let dir = match output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        bail!(
            "cannot write the trace to {}: the directory {} does not exist (create it, or \
             choose another -o); nothing was recorded",
            output.display(),
            dir.display()
        );
    }
    // The trace is written to a temporary file beside -o, then renamed: try exactly that.
    tempfile::Builder::new()
        .prefix(".ptscope-check-")
        .tempfile_in(dir)
        .map(drop)
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot write the trace to {}: cannot create files in {} ({}); choose \
                 another -o; nothing was recorded",
                output.display(),
                dir.display(),
                std::io::Error::from(e.kind())
            )
        })
}

/// The working directory: `-w DIR` (which must be private: perf, its control fifos and
/// its log live there) or a fresh private temporary one in `$TMPDIR`. Either is
/// resolved once and checked to be out of other users' reach, every directory above it
/// included (`ptscope_rootsafe::TrustedDir`); only the resolved path is used after, so
/// a link flipped after the check changes nothing.
fn working_dir(asked: Option<&Path>) -> Result<(PathBuf, Option<tempfile::TempDir>)> {
    let Some(d) = asked else {
        let parent = ptscope_rootsafe::temp_parent()?;
        // 0700: the recording shows what the program did; tempfile's default is 0755.
        let t = tempfile::Builder::new()
            .prefix("ptscope-rec-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(&parent)
            .with_context(|| {
                format!(
                    "cannot create a temporary working directory in {} (is TMPDIR writable?)",
                    parent.display()
                )
            })?;
        let checked = ptscope_rootsafe::TrustedDir::check(t.path())?;
        return Ok((checked.path().to_path_buf(), Some(t)));
    };
    let dir =
        ptscope_rootsafe::TrustedDir::private(d).with_context(|| format!("-w {}", d.display()))?;
    Ok((dir.path().to_path_buf(), None))
}

/// How a failed program's status is passed on: its exit code, or 128+N for signal N.
fn program_exit_code(s: std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    if s.success() {
        None
    } else {
        Some(s.code().or(s.signal().map(|n| 128 + n)).unwrap_or(1))
    }
}

fn record_and_decode(a: &RecordArgs, target: Target) -> Result<i32> {
    messages::set_quiet(a.quiet);
    if a.backend == Some(BackendArg::Emulate) {
        return emulate_and_decode(a, target);
    }
    if a.clock.is_some() {
        bail!(
            "--clock chooses the times of the emulate backend only (--backend emulate); \
             perf recordings carry perf's own timestamps: drop --clock"
        );
    }
    let filter = filter_range(a)?;
    let perf = a
        .perf
        .clone()
        .unwrap_or_else(ptscope_decode::perf::default_perf);
    let scope = match (a.trace_include_kernel, a.kernel_only) {
        (_, true) => TraceScope::Kernel,
        (true, _) => TraceScope::UserspaceAndKernel,
        _ => TraceScope::Userspace,
    };
    let trigger = match a.trigger.as_deref() {
        None => None,
        Some(s) if s == "?" || s == "symbol:?" => Some(TriggerSpec::Symbol(pick_symbol(&target)?)),
        Some(s) => Some(TriggerSpec::parse(s)?),
    };
    if !a.no_decode {
        check_output(&a.output)?;
    }
    let (working_dir, temp) = working_dir(a.working_directory.as_deref())?;
    let kept_message = format!(
        "the recording is kept in {d}; `ptscope decode {d}` decodes it",
        d = working_dir.display()
    );
    let base = install_presses("stopping the recording", &kept_message)?;
    let bound = a
        .snapshot_size
        .as_deref()
        .map(parse_snapshot_bound)
        .transpose()?;
    let opts = Options {
        perf: perf.clone(),
        target,
        working_dir: working_dir.clone(),
        backend: a.backend.map(|b| match b {
            BackendArg::Pt => Backend::Pt,
            BackendArg::Sample => Backend::Sample,
            BackendArg::Emulate => unreachable!("the emulate backend returned above"),
        }),
        scope,
        timer: TimerResolution::parse(&a.timer_resolution)?,
        single_thread: a.single_thread,
        multi_snapshot: a.multi_snapshot,
        full_execution: a.full_execution,
        snapshot_pages: match bound {
            Some(SnapshotBound::Pages(p)) => Some(p),
            _ => None,
        },
        snapshot_seconds: match bound {
            Some(SnapshotBound::Seconds(s)) => Some(s),
            _ => None,
        },
        callgraph: a.callgraph.map(|c| match c {
            CallGraphArg::Fp => CallGraph::Fp,
            CallGraphArg::Dwarf => CallGraph::Dwarf,
            CallGraphArg::Lbr => CallGraph::Lbr,
        }),
        trigger,
        caps: None,
        quiet: a.quiet,
        say: Some(session::Say::new(|m| crate::messages::info(m))),
    };
    let outcome = session::record(&opts)?;
    // The builtin decoder reads the vDSO's code from this copy when perf kept none (its
    // build-id cache not writable); it checks the build id before using it.
    if let Err(e) = ptscope_pt_decode::save_vdso(&working_dir) {
        messages::info(format!(
            "cannot save the vDSO in {}: {e}; calls into it decode as missing code",
            working_dir.display()
        ));
    }
    for w in &outcome.warnings {
        messages::warn(w);
    }
    match outcome.ended_by {
        EndReason::Trigger => messages::info(format!(
            "trigger hit ({} at {:#x}, tid {})",
            outcome
                .hits
                .last()
                .map(|h| h.symbol.as_str())
                .unwrap_or("?"),
            outcome.hits.last().map(|h| h.ip).unwrap_or(0),
            outcome.hits.last().map(|h| h.tid).unwrap_or(0)
        )),
        EndReason::Signal(_) => messages::info("stopped; snapshot taken"),
        EndReason::ProgramExited | EndReason::PerfStopped(_) => {}
    }
    let program_code = outcome.program_status.and_then(program_exit_code);
    if let Some(s) = outcome.program_status {
        if !s.success() {
            messages::warn(format!(
                "the program {}; the trace shows its last moments",
                describe_exit(s)
            ));
        }
    }
    if a.trigger.is_some() && outcome.hits.is_empty() {
        messages::warn("the trigger never fired; the snapshot is from the end of the recording");
    }
    let options = DecodeOptions {
        output: a.output.clone(),
        scope: Some(scope),
        executable: outcome.exe.clone(),
        filter,
        missed_trigger: match &opts.trigger {
            Some(TriggerSpec::Symbol(name)) if outcome.hits.is_empty() => Some(name.clone()),
            _ => None,
        },
        decoder: a.decoder,
        perf,
        // Taken from the command line `ptscope run` started: a trace that never enters
        // it (a program that exited at once) needs no notice.
        executable_implied: true,
        output_filter: a.shape.filter(),
        ..DecodeOptions::new(Input::Recording(working_dir.clone()))
    };
    decode_recorded(a, &options, base, temp, &kept_message, program_code)
}

/// Installs the Ctrl-C handler for a recording (README "Interrupts"): the first press
/// says `first` (what stops), the third quits, keeping the recording. Returns the
/// presses counted before.
fn install_presses(first: &str, kept_message: &str) -> Result<usize> {
    ptscope_interrupt::install().context("cannot install the Ctrl-C handler")?;
    let base = ptscope_interrupt::presses();
    ptscope_interrupt::say_at(
        base + 1,
        format!("ptscope: {first} (Ctrl-C again to stop decoding early, a third time to quit)"),
    );
    ptscope_interrupt::set_quit(
        base + 3,
        format!("ptscope: interrupted three times: quitting; {kept_message}"),
    );
    Ok(base)
}

/// After a recording: with `--no-decode` keeps it and stops; else decodes it with the
/// next press (after the one that stopped the recording, if any) cutting the decode short.
fn decode_recorded(
    a: &RecordArgs,
    options: &DecodeOptions,
    base: usize,
    temp: Option<tempfile::TempDir>,
    kept_message: &str,
    program_code: Option<i32>,
) -> Result<i32> {
    // From here a failure or an interrupt keeps the recording instead of removing it.
    if a.no_decode {
        if let Some(t) = temp {
            let _ = t.keep();
        }
        messages::info(kept_message);
        return Ok(program_code.unwrap_or(0));
    }
    // A press that stopped the recording is the first; the next one stops decoding.
    let pressed = ptscope_interrupt::presses() - base;
    let stop_at = base + pressed.min(1) + 1;
    ptscope_interrupt::say_at(
        stop_at,
        "ptscope: interrupted: writing what was decoded so far (Ctrl-C again to quit, keeping the recording)",
    );
    ptscope_interrupt::set_quit(
        stop_at + 1,
        format!("ptscope: interrupted again: quitting; {kept_message}"),
    );
    decode_keeping_the_recording(
        options,
        stop_at,
        temp,
        a.working_directory.is_some(),
        kept_message,
        program_code,
        &a.after,
    )
}

/// Decodes what `run`/`attach` recorded. A temporary recording is removed once decoded
/// whole, and kept (and named) when the decode failed or was cut short; one the user
/// placed with `-w` is always kept. The program's failure status wins over ptscope's.
fn decode_keeping_the_recording(
    options: &DecodeOptions,
    stop_at: usize,
    temp: Option<tempfile::TempDir>,
    user_dir: bool,
    kept_message: &str,
    program_code: Option<i32>,
    after: &crate::view::AfterFlags,
) -> Result<i32> {
    let result = decode::run(options, stop_at);
    let whole = matches!(&result, Ok(r) if !r.interrupted && r.incomplete.is_empty());
    if user_dir {
        drop(temp);
        messages::info(kept_message);
    } else if !whole {
        if let Some(t) = temp {
            let _ = t.keep();
        }
        messages::warn(kept_message);
    }
    let report = result?;
    let code = program_code.unwrap_or_else(|| decode::exit_status(&report));
    after.run(&options.output, report.interrupted, code)
}

/// Reads one line from the terminal after a prompt.
fn prompt(msg: &str) -> Result<String> {
    eprint!("{msg}");
    std::io::stderr().flush().ok();
    let mut s = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut s)
        .context("reading your answer")?;
    Ok(s.trim().to_owned())
}

/// A small fuzzy picker: type words to narrow the list, a number to choose.
fn pick(what: &str, items: &[String]) -> Result<usize> {
    if !std::io::stdin().is_terminal() {
        bail!("choosing {what} interactively needs a terminal; name it on the command line");
    }
    let mut query = String::new();
    loop {
        let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
        let m: Vec<(usize, &String)> = rank(items, &words)
            .into_iter()
            .map(|i| (i, &items[i]))
            .collect();
        for (n, (_, s)) in m.iter().take(20).enumerate() {
            eprintln!("{:>3}  {s}", n + 1);
        }
        if m.len() > 20 {
            eprintln!("     … {} more; type to narrow", m.len() - 20);
        }
        if m.is_empty() {
            eprintln!("  (nothing matches `{query}`)");
        }
        let ans = prompt(&format!(
            "{what} (words to filter, number to choose, empty to quit)> "
        ))?;
        if ans.is_empty() {
            bail!("nothing chosen");
        }
        if let Ok(n) = ans.parse::<usize>() {
            if let Some((i, _)) = m.get(n.wrapping_sub(1)) {
                return Ok(*i);
            }
        }
        query = ans;
    }
}

/// The indices of `items` matching every (lowercase) word, best first.
///
/// Items where every word appears as typed come before ones that only match letter by
/// letter, so a precise query is never outranked by a shorter near miss; then shorter first.
fn rank(items: &[String], words: &[String]) -> Vec<usize> {
    let mut m: Vec<(bool, usize, usize)> = items
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let l = s.to_lowercase();
            let fuzzy_only = !words.iter().all(|w| l.contains(w.as_str()));
            words
                .iter()
                .all(|w| fuzzy(&l, w))
                .then_some((fuzzy_only, s.len(), i))
        })
        .collect();
    m.sort();
    m.into_iter().map(|(_, _, i)| i).collect()
}

/// True if the characters of `needle` appear in order in `hay`.
fn fuzzy(hay: &str, needle: &str) -> bool {
    let mut it = hay.chars();
    needle.chars().all(|c| it.any(|h| h == c))
}

fn pick_process() -> Result<u32> {
    if !std::io::stdin().is_terminal() {
        bail!("give the process to attach to with -p PID (find it with `ps x` or `pgrep NAME`)");
    }
    let me = std::process::id();
    let procs: Vec<(u32, String)> = ptscope_record::process::list_processes()
        .into_iter()
        .filter(|(p, _)| *p != me)
        .collect();
    let items: Vec<String> = procs.iter().map(|(p, c)| format!("{p:>7} {c}")).collect();
    let i = pick("process", &items)?;
    Ok(procs[i].0)
}

fn pick_symbol(target: &Target) -> Result<String> {
    let exe: PathBuf = match target {
        Target::Attach(p) => std::fs::read_link(format!("/proc/{}/exe", p[0]))
            .with_context(|| format!("cannot read the executable of process {}", p[0]))?,
        Target::Run(argv) => {
            ptscope_record::process::which(Path::new(argv.first().context("no command given")?))?
        }
    };
    let file = ptscope_symbols::MappedFile::open(&exe)?;
    let elf = file.elf()?;
    let syms = elf.symbols()?;
    let mut names: Vec<String> = syms
        .functions()
        .iter()
        .map(|f| f.demangled().to_owned())
        .collect();
    names.sort();
    names.dedup();
    let i = pick("function", &names)?;
    Ok(names[i].clone())
}

/// Finds a command the way exec does (a path with `/`, else `$PATH`).
/// `--filter START,STOP` as two function names.
fn filter_range(a: &RecordArgs) -> Result<Option<(String, String)>> {
    a.filter
        .as_deref()
        .map(|f| {
            f.split_once(',')
                .map(|(x, y)| (x.trim().to_string(), y.trim().to_string()))
                .filter(|(x, y)| !x.is_empty() && !y.is_empty())
                .with_context(|| format!("--filter {f}: expected START,STOP (two function names)"))
        })
        .transpose()
}

/// `run --backend emulate`: the program runs under qemu-user with ptscope's plugin
/// (`ptscope_emulate::session`), and the block log is decoded into exact call stacks (no
/// perf involved).
fn emulate_and_decode(a: &RecordArgs, target: Target) -> Result<i32> {
    use ptscope_emulate::session::{Options as EmulateOptions, Plan, Tell};
    let filter = filter_range(a)?;
    let tell = Tell {
        info: &|m| messages::info(m),
        warn: &|m| messages::warn(m),
    };
    let ignored = [
        (a.callgraph.is_some(), "--callgraph"),
        (a.single_thread, "--single-thread"),
    ];
    let plan = Plan::new(
        &EmulateOptions {
            kernel: a.trace_include_kernel || a.kernel_only,
            trigger: a.trigger.clone(),
            multi_snapshot: a.multi_snapshot,
            full_execution: a.full_execution,
            snapshot_size: a.snapshot_size.clone(),
            ignored: ignored.iter().filter(|i| i.0).map(|i| i.1).collect(),
            ..EmulateOptions::new(target)
        },
        &tell,
    )?;
    if !a.no_decode {
        check_output(&a.output)?;
    }
    let (working_dir, temp) = working_dir(a.working_directory.as_deref())?;
    let kept_message = format!(
        "the recording is kept in {d}; `ptscope decode {d} --executable {e}` decodes it",
        d = working_dir.display(),
        e = plan.exe().display()
    );
    let base = install_presses("stopping the program", &kept_message)?;
    let status = plan.record(&working_dir, &tell)?;
    let mut options = DecodeOptions {
        output: a.output.clone(),
        scope: Some(TraceScope::Userspace),
        executable: Some(plan.exe().to_path_buf()),
        filter,
        decoder: a.decoder,
        executable_implied: true,
        clock: a.clock.map(Into::into),
        output_filter: a.shape.filter(),
        ..DecodeOptions::new(Input::Recording(working_dir.clone()))
    };
    if let Some(perf) = &a.perf {
        options.perf = perf.clone();
    }
    decode_recorded(
        a,
        &options,
        base,
        temp,
        &kept_message,
        program_exit_code(status),
    )
}

#[cfg(test)]
mod picker_tests {
    use super::rank;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn exact_words_outrank_shorter_fuzzy_matches() {
        let items = names(&[
            "   12 /tmp/a/pick_target",
            "   13 /tmp/b/pick_target forever",
            "   14 bash",
        ]);
        let w = vec!["b/pick_target".to_owned(), "forever".to_owned()];
        assert_eq!(rank(&items, &w), vec![1]);
        // `ptgt` only matches letter by letter; shorter first among those.
        let w = vec!["ptgt".to_owned()];
        assert_eq!(rank(&items, &w), vec![0, 1]);
        let w = vec!["bash".to_owned()];
        assert_eq!(rank(&items, &w), vec![2]);
        // A substring match beats a shorter subsequence-only one.
        let items = names(&["spin_a_pick", "pickme_spin_longer_name"]);
        assert_eq!(rank(&items, &["pickme".to_owned()]), vec![1]);
        let items = names(&["pxixcxkxmxe", "pickme_spin_longer_name"]);
        assert_eq!(rank(&items, &["pickme".to_owned()]), vec![1, 0]);
        assert_eq!(rank(&items, &[]), vec![0, 1]);
    }
}
