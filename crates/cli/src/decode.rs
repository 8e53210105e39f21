//! `ptscope decode`: from a recording (or `perf script` text) to a trace file.

use anyhow::{Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use ptscope_event::TraceScope;
use ptscope_pipeline::{DecodeOptions, Input, Observer, Report};
pub use ptscope_pipeline::{DecoderKind, Format, WriterKind};
use std::path::PathBuf;
use std::sync::Mutex;

/// Arguments of `ptscope decode`.
#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  # Decode a recording made by `ptscope run -w DIR` or by perf itself:
  ptscope decode DIR -o trace.fxt.gz
  ptscope decode perf.data -o trace.fxt.gz
  # Decode perf script text someone sent you (or pipe it in with `-`):
  ptscope decode --perf-script script.txt -o trace.fxt.gz
  perf script --ns --itrace=bep -F pid,tid,time,flags,ip,addr,sym,symoff,synth,dso,event,period \\
    | ptscope decode --perf-script - -o trace.fxt.gz
  # Print magic-trace's test transcript instead of a trace file:
  ptscope decode --perf-script input.perf --format transcript -o -
  # A trace too large for the viewer: a time window, calls of 1 us or more, 30 deep:
  ptscope decode DIR --window 1.5s..2s --min-duration 1us --max-depth 30

Open the .fxt.gz file at https://ui.perfetto.dev (Open trace file), or let ptscope serve it
to the UI: `ptscope view trace.fxt.gz` (or --view); `--report` (or `ptscope report`)
summarises it in the terminal.
Ctrl-C (or SIGTERM/SIGHUP) stops decoding and still writes what was decoded so far, then
exits with status 130; a second one quits at once without writing. The trace appears at
-o only when complete (written to a temporary file beside it, then renamed).
A perf that makes no progress (no output, no CPU time of its own) for 30 s is stopped
and said so; the trace holds what was decoded (PTSCOPE_PERF_STALL=SECONDS sets the limit).
Exit status: 0 when the whole input was decoded; 1 when nothing could be decoded, or when
the trace is incomplete (perf died or the input is cut short): it is still written.")]
pub struct DecodeArgs {
    /// A perf.data file, or a working directory holding perf.data files (one per snapshot).
    #[arg(value_name = "RECORDING", conflicts_with = "perf_script")]
    pub input: Option<PathBuf>,

    /// Read `perf script` text from FILE instead of running perf (`-` for stdin).
    #[arg(long, value_name = "FILE")]
    pub perf_script: Option<PathBuf>,

    /// Where to write the trace (`.fxt.gz` is gzipped, `.fxt` raw, `-` stdout).
    #[arg(short, long, value_name = "FILE", default_value = "trace.fxt.gz")]
    pub output: PathBuf,

    /// What to show: user space (`u`), user space and kernel (`uk`), kernel only (`k`);
    /// sampled stacks keep only these frames. Default: what a sampling recording's event
    /// counted (`cpu-clock:u` → u), else u.
    #[arg(long, value_name = "SCOPE", value_parser = parse_scope)]
    pub scope: Option<TraceScope>,

    /// Which stack reconstruction to use.
    #[arg(long, value_enum, default_value_t = WriterKind::Segments)]
    pub writer: WriterKind,

    /// Where decode errors leave frames unproven (a burst of overflows: they may have
    /// returned in a gap, others may have been called there), show the likelier guess
    /// that they kept running instead of one `[unknown frames lost in decode error]`
    /// frame in their place (the default: what the trace cannot decide is marked, not
    /// invented). Segments writer only.
    #[arg(long, conflicts_with = "mark_unknown_frames")]
    pub guess_unknown_frames: bool,

    /// The marker frame where decode errors leave frames unproven: the default now,
    /// accepted for scripts written when it was not.
    #[arg(long, hide = true)]
    pub mark_unknown_frames: bool,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Fxt)]
    pub format: Format,

    /// OCaml exception trap addresses, as a TOML file with `entertraps`, `pushtraps` and
    /// `poptraps` arrays (top level or under `[ocaml_exception_info]`, as in magic-trace's test cases).
    #[arg(long, value_name = "FILE")]
    pub ocaml_exception_info: Option<PathBuf>,

    /// Keep only what happens from a call to START until the next call to STOP (both
    /// function names as shown in the trace), e.g. `--filter handle_request,send_reply`.
    /// A START with no STOP after it keeps the rest of the trace.
    #[arg(long, value_name = "START,STOP", value_parser = parse_filter)]
    pub filter: Option<(String, String)>,

    /// Show symbols as perf printed them: no Rust, C++ or OCaml demangling (transcripts
    /// never demangle, to stay comparable with magic-trace's).
    #[arg(long)]
    pub no_demangle: bool,

    /// Name each sampled frame by the function perf's symbol table puts it in, as
    /// `perf report` does, without frames for the calls inlined there (which ptscope
    /// otherwise reads from the files' DWARF): self sample counts then compare with perf
    /// report's.
    #[arg(long, conflicts_with = "perf_inline")]
    pub no_inline: bool,

    /// Let perf expand inlined calls (its `addr2line` lookup, `perf script`'s default)
    /// instead of ptscope reading them from DWARF: for comparing with perf's own output.
    /// Much slower (80 times on a `make -j2` recording), and perf 6.1 waited forever on
    /// node's; the watchdog then decodes the rest without it.
    #[arg(long)]
    pub perf_inline: bool,

    /// The traced executable, for source positions of functions (DWARF) and OCaml
    /// exception traps (`.note.ocaml_eh`); PIE load addresses are found from the trace.
    #[arg(long, value_name = "PATH")]
    pub executable: Option<PathBuf>,

    /// How to read perf.data: `builtin`, ptscope's own Intel PT decoder (no perf; every
    /// instruction known, branches timed where they ran); `dlfilter`, perf's decoder
    /// through ptscope's perf dlfilter (binary, fast); `text`, `perf script` text; `auto`:
    /// builtin for Intel PT recordings (perf's path, with a notice, when it cannot decode
    /// one), else the dlfilter when perf supports it (perf >= 5.14), else text.
    #[arg(long, value_enum, default_value_t = DecoderKind::Auto)]
    pub decoder: DecoderKind,

    /// The perf binary to run (default: `$PTSCOPE_PERF`, else `perf` on PATH).
    #[arg(long, value_name = "PATH")]
    pub perf: Option<PathBuf>,

    /// No progress bar and no informational messages (warnings and errors still show).
    #[arg(short, long)]
    pub quiet: bool,

    /// Times of an emulate recording: `host` (default: the host's clock, emulation
    /// slowdown included) or `virtual` (1 guest instruction = 1 ns, plus the real time
    /// spent in syscalls). Emulate recordings only.
    #[arg(long, value_enum, value_name = "CLOCK")]
    pub clock: Option<ClockArg>,

    /// What of the trace to keep.
    #[command(flatten)]
    pub shape: ShapeArgs,

    #[command(flatten)]
    pub after: crate::view::AfterFlags,
}

/// What of a trace to keep, for a trace too large for the viewer to open (on every
/// backend). Nothing is dropped silently: a slice whose calls were left out counts them.
#[derive(Args, Debug, Default, Clone)]
pub struct ShapeArgs {
    /// Keep only START..END of the trace, as times from its start (e.g. `1.5s..2s`,
    /// `..500ms`, `2s..`); slices across the edges are cut there.
    #[arg(long, value_name = "START..END", value_parser = ptscope_output::filter::parse_window)]
    pub window: Option<(Option<u64>, Option<u64>)>,
    /// Leave out slices deeper than N (1: each thread's outermost function only); the
    /// slices at depth N count what they hid (args `hidden_calls`, `hidden_ns`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_depth: Option<u64>,
    /// Leave out calls shorter than DURATION (e.g. `1us`, `250ns`, `1ms`), with what they
    /// called; each parent counts the calls it hid (args `hidden_calls`, `hidden_ns`).
    #[arg(long, value_name = "DURATION", value_parser = ptscope_output::filter::parse_duration)]
    pub min_duration: Option<u64>,
}

impl ShapeArgs {
    /// The output filter the flags ask for.
    pub fn filter(&self) -> ptscope_pipeline::OutputFilter {
        ptscope_pipeline::OutputFilter {
            window: self.window,
            max_depth: self.max_depth.map(|d| d as usize),
            min_duration: self.min_duration.unwrap_or(0),
        }
    }
}

/// `--clock`: which clock an emulate trace's times follow.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClockArg {
    /// The host's monotonic clock: real time, emulation slowdown included.
    Host,
    /// Guest instructions at 1 GHz plus the real time spent in syscalls.
    Virtual,
}

impl From<ClockArg> for ptscope_emulate::ClockKind {
    fn from(c: ClockArg) -> Self {
        match c {
            ClockArg::Host => ptscope_emulate::ClockKind::Host,
            ClockArg::Virtual => ptscope_emulate::ClockKind::Virtual,
        }
    }
}

fn parse_filter(s: &str) -> Result<(String, String), String> {
    match s.split_once(',') {
        Some((a, b)) if !a.trim().is_empty() && !b.trim().is_empty() => {
            Ok((a.trim().to_string(), b.trim().to_string()))
        }
        _ => Err(format!(
            "'{s}' is not START,STOP: give two function names separated by a comma"
        )),
    }
}

fn parse_scope(s: &str) -> Result<TraceScope, String> {
    TraceScope::parse(s).ok_or_else(|| format!("'{s}' is not a trace scope; use u, uk or k"))
}

impl DecodeArgs {
    /// What the flags ask the pipeline for.
    pub fn options(&self) -> DecodeOptions {
        let input = match &self.perf_script {
            Some(p) => Input::PerfScript(p.clone()),
            None => Input::Recording(
                self.input
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("perf.data")),
            ),
        };
        DecodeOptions {
            input,
            output: self.output.clone(),
            scope: self.scope,
            writer: self.writer,
            format: self.format,
            ocaml_exception_info: self.ocaml_exception_info.clone(),
            filter: self.filter.clone(),
            missed_trigger: None,
            demangle: !self.no_demangle,
            no_inline: self.no_inline,
            perf_inline: self.perf_inline,
            executable: self.executable.clone(),
            executable_implied: false,
            decoder: self.decoder,
            perf: self
                .perf
                .clone()
                .unwrap_or_else(ptscope_decode::perf::default_perf),
            clock: self.clock.map(Into::into),
            output_filter: self.shape.filter(),
            mark_unknown_frames: !self.guess_unknown_frames,
        }
    }
}

/// The pipeline's progress as a bar on stderr (none under `-q`), messages through
/// [`crate::messages`], and interrupts: decoding stops once `stop_at` were counted.
struct Progress {
    stop_at: usize,
    bar: Mutex<Option<ProgressBar>>,
}

impl Progress {
    fn bar(&self) -> std::sync::MutexGuard<'_, Option<ProgressBar>> {
        self.bar.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Observer for Progress {
    fn started(&self, input: &str, size: Option<u64>) {
        if crate::messages::quiet() {
            return;
        }
        let pb = match size {
            Some(n) => ProgressBar::new(n).with_style(
                ProgressStyle::with_template(
                    "{spinner} decoding {msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} decoding {msg}: {pos} events ({per_sec})")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        pb.set_message(input.to_string());
        *self.bar() = Some(pb);
    }
    fn advanced(&self, position: u64) {
        if let Some(pb) = &*self.bar() {
            pb.set_position(position);
        }
    }
    fn finished(&self) {
        if let Some(pb) = self.bar().take() {
            pb.finish_and_clear();
        }
    }
    fn info(&self, text: &str) {
        crate::messages::info(text);
    }
    fn warning(&self, text: &str) {
        crate::messages::writer_warning(text);
    }
    fn stopped(&self) -> bool {
        ptscope_interrupt::presses() >= self.stop_at
    }
}

/// Runs `ptscope decode` and turns its report into an exit status.
pub fn command(args: DecodeArgs) -> Result<i32> {
    crate::messages::set_quiet(args.quiet);
    ptscope_interrupt::install().context("cannot install the Ctrl-C handler")?;
    // The next interrupt stops decoding.
    let stop_at = ptscope_interrupt::presses() + 1;
    ptscope_interrupt::say_at(
        stop_at,
        "ptscope: interrupted; writing what was decoded so far (Ctrl-C again to quit without writing)",
    );
    ptscope_interrupt::set_quit(
        stop_at + 1,
        "ptscope: interrupted again; quitting without writing the trace",
    );
    let report = run(&args.options(), stop_at)?;
    args.after
        .run(&args.output, report.interrupted, exit_status(&report))
}

/// The exit status of an interrupted decode: 130, as for a Ctrl-C'd program.
pub const INTERRUPTED: i32 = 130;

/// [`INTERRUPTED`] when interrupted, 1 when the trace is incomplete.
pub fn exit_status(report: &Report) -> i32 {
    if report.interrupted {
        INTERRUPTED
    } else if !report.incomplete.is_empty() {
        1
    } else {
        0
    }
}

/// Decodes as `opts` say (stopping once `stop_at` interrupts were counted) and says
/// how it went; the trace is written even when incomplete (the report says why).
pub fn run(opts: &DecodeOptions, stop_at: usize) -> Result<Report> {
    let progress = Progress {
        stop_at,
        bar: Mutex::new(None),
    };
    let report = ptscope_pipeline::decode(opts, &progress)?;
    crate::messages::report(&report, &opts.output);
    Ok(report)
}
