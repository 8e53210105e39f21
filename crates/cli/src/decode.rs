//! `ptscope decode`: from a recording (or `perf script` text) to a trace file.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use ptscope_decode::{Decoder, RecordingKind, Stats, Warning};
use ptscope_dlfilter_reader::{AnyScript, Choice, DlfilterOptions};
use ptscope_event::{Event, OcamlExceptionInfo, StringTable, TraceScope};
use ptscope_stacks::legacy::{LegacyConfig, LegacyWriter};
use ptscope_stacks::ordered::OrderedSink;
use ptscope_stacks::segments::{SegmentsConfig, SegmentsWriter};
use ptscope_stacks::transcript::TranscriptSink;
use ptscope_stacks::StackWriter;
use ptscope_stacks::TraceSink;
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};

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

Open the .fxt.gz file at https://ui.perfetto.dev (Open trace file).
Ctrl-C (or SIGTERM/SIGHUP) stops decoding and still writes what was decoded so far, then
exits with status 130; a second one quits at once without writing. The trace appears at
-o only when complete (written to a temporary file beside it, then renamed).
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

    /// A `run --trigger` function that was never hit, for a warning naming the trace's
    /// functions with similar names.
    #[arg(skip)]
    pub missed_trigger: Option<String>,

    /// Show symbols as perf printed them: no Rust, C++ or OCaml demangling (transcripts
    /// never demangle, to stay comparable with magic-trace's).
    #[arg(long)]
    pub no_demangle: bool,

    /// Name each sampled frame by the function perf's symbol table puts it in, as
    /// `perf report` does, instead of expanding it into the functions inlined there
    /// (`perf script --no-inline`): self sample counts then compare with perf report's.
    #[arg(long)]
    pub no_inline: bool,

    /// The traced executable, for source positions of functions (DWARF) and OCaml
    /// exception traps (`.note.ocaml_eh`); PIE load addresses are found from the trace.
    #[arg(long, value_name = "PATH")]
    pub executable: Option<PathBuf>,

    /// How to read perf.data: through ptscope's perf dlfilter (binary, fast), as
    /// `perf script` text, or the dlfilter when perf supports it (perf >= 5.14).
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

/// What `run`/`attach` tell the decode that is not a flag.
#[derive(Clone, Copy, Debug)]
pub struct DecodeContext {
    /// The executable was not named by the user but taken from `ptscope run`: a trace
    /// that never enters it (a program that exited at once) needs no warning.
    pub executable_implied: bool,
    /// Decoding stops (keeping what was decoded) once this many interrupts were counted.
    pub stop_at: usize,
    /// Events after this time are not written (a trigger's snapshot ends at the hit).
    pub end_at: Option<u64>,
}

impl DecodeContext {
    /// `ptscope decode` on its own: the next interrupt stops decoding.
    pub fn standalone() -> Self {
        DecodeContext {
            executable_implied: false,
            stop_at: ptscope_interrupt::presses() + 1,
            end_at: None,
        }
    }

    /// True once decoding should stop.
    pub fn stopped(&self) -> bool {
        ptscope_interrupt::presses() >= self.stop_at
    }
}

/// How a decode ended, for the caller's message and exit status.
#[derive(Debug, Default)]
pub struct Report {
    /// Why the trace is not the whole input (perf died, the input was cut short, …).
    pub incomplete: Vec<String>,
    /// An interrupt stopped decoding early.
    pub interrupted: bool,
}

/// Decode paths for perf.data files.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum DecoderKind {
    /// The dlfilter if this perf can load it, else text (with a one-line notice).
    Auto,
    /// The dlfilter, or an error saying why not.
    Dlfilter,
    /// `perf script` text.
    Text,
}

/// Stack writers to choose from.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum WriterKind {
    /// magic-trace's streaming writer, reproduced exactly (the reference).
    Legacy,
    /// Whole segments rebuilt in memory and stitched across decode errors.
    Segments,
}

/// Output formats.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Fuchsia Trace Format, for the Perfetto UI.
    Fxt,
    /// magic-trace's test transcript (`-> TIME BEGIN name` lines).
    Transcript,
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

/// Which events fall in a `--filter` range: from a call to START to the next call to
/// STOP (magic-trace decides this in a second decoding pass and drops a START that
/// has no STOP; one streaming pass keeps it, so a range open at the end is kept).
struct RangeFilter {
    start: String,
    stop: String,
    inside: bool,
    /// START was called at least once (else the trace is empty: worth a warning).
    seen_start: bool,
    /// STOP was called after a START.
    seen_stop: bool,
}

impl RangeFilter {
    fn should_write(&mut self, event: &Event, strings: &StringTable) -> bool {
        use ptscope_event::{EventData, Kind};
        let hit = match event {
            Event::Ok {
                data:
                    EventData::Trace {
                        kind: Some(Kind::Call),
                        dst,
                        ..
                    },
                ..
            } => Some(strings.display(dst.symbol)),
            // A sample enters the range when its innermost START or STOP frame says so.
            Event::Ok {
                data: EventData::StackSample { callstack },
                ..
            } => (strings.stack(*callstack))
                .rev()
                .map(|l| strings.display(l.symbol))
                .find(|n| *n == self.start || *n == self.stop),
            _ => None,
        };
        match hit {
            Some(n) if n == self.start => {
                self.inside = true;
                self.seen_start = true;
            }
            Some(n) if n == self.stop => {
                self.seen_stop |= self.inside;
                self.inside = false;
            }
            _ => {}
        }
        self.inside
    }

    /// What the user should know when the range never opened or never closed.
    fn note(&self, strings: &StringTable) -> Option<String> {
        if !self.seen_start {
            return Some(format!(
                "--filter: no call to `{}` was seen, so the trace is empty{}",
                self.start,
                similar_names(strings, &self.start)
            ));
        }
        if !self.seen_stop && self.start != self.stop {
            return Some(format!(
                "--filter: `{}` was never called after `{}`, so the trace runs to the end{}",
                self.stop,
                self.start,
                similar_names(strings, &self.stop)
            ));
        }
        None
    }
}

/// `; names in the trace like it: …` with the function names nearest to `want` (a
/// case-insensitive substring either way, else a small edit distance), or nothing.
pub(crate) fn similar_names(strings: &StringTable, want: &str) -> String {
    let names = nearest_names(strings, want, 5);
    if names.is_empty() {
        return String::from("; no name in the trace is like it");
    }
    format!(
        "; names in the trace like it: {}",
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Up to `n` distinct function names from `strings` nearest to `want`, best first.
pub(crate) fn nearest_names(strings: &StringTable, want: &str, n: usize) -> Vec<String> {
    let w = want.to_lowercase();
    let wc: Vec<char> = w.chars().collect();
    let limit = (wc.len() / 3).max(2);
    let mut found: Vec<(usize, usize, String)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for i in 0..strings.len() {
        let name = strings.display(ptscope_event::Symbol::FromPerf(ptscope_event::Sym(
            i as u32,
        )));
        // Paths, thread names with spaces and perf's `[unknown …]` are not functions.
        if name.is_empty() || name.contains('/') || name.contains(' ') || name.starts_with('[') {
            continue;
        }
        if !seen.insert(name) {
            continue;
        }
        let l = name.to_lowercase();
        let lc = l.chars().count();
        let rank = if l == w {
            // The same name in another case, or demangled differently.
            Some((0, 0))
        } else if (wc.len() >= 3 && l.contains(&w))
            || (lc >= 4 && lc * 3 >= wc.len() * 2 && w.contains(&l))
        {
            Some((1, lc.abs_diff(wc.len())))
        } else if lc.abs_diff(wc.len()) <= limit {
            let d = edit_distance(&wc, &l.chars().collect::<Vec<_>>());
            (d <= limit).then_some((2, d))
        } else {
            None
        };
        if let Some((class, d)) = rank {
            found.push((class, d, name.to_owned()));
        }
    }
    found.sort();
    found.into_iter().take(n).map(|(_, _, s)| s).collect()
}

/// Levenshtein distance.
fn edit_distance(a: &[char], b: &[char]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

fn parse_scope(s: &str) -> Result<TraceScope, String> {
    TraceScope::parse(s).ok_or_else(|| format!("'{s}' is not a trace scope; use u, uk or k"))
}

/// One input to decode: each becomes its own snapshot.
enum Source {
    Text(Box<Decoder<BufReader<Box<dyn Read + Send>>>>, u64),
    Perf(Box<AnyScript>),
    /// An emulate recording: events derived from qemu's block log, no perf involved.
    Emulate(Box<ptscope_emulate::Trace>),
}

impl Source {
    fn next_event(&mut self) -> Result<Option<Event>, String> {
        match self {
            Source::Text(d, _) => d.next_event().map_err(|e| e.to_string()),
            Source::Perf(p) => p.next_event().map_err(|e| e.to_string()),
            Source::Emulate(e) => Ok(e.next_event()),
        }
    }
    fn strings(&self) -> &StringTable {
        match self {
            Source::Text(d, _) => d.strings(),
            Source::Perf(p) => p.strings(),
            Source::Emulate(e) => e.strings(),
        }
    }
    fn decoder_stats(&self) -> Stats {
        match self {
            Source::Text(d, _) => *d.stats(),
            Source::Perf(p) => p.stats(),
            Source::Emulate(e) => Stats {
                events: e.stats().events - e.remaining() as u64,
                ..Stats::default()
            },
        }
    }
    fn warnings(&self) -> Vec<Warning> {
        match self {
            Source::Text(d, _) => d.warnings().to_vec(),
            Source::Perf(p) => p.warnings(),
            Source::Emulate(_) => Vec::new(),
        }
    }
    /// Runs the naming step on `event`, interning new names in the source's own table.
    fn name(&mut self, namer: &mut ptscope_symbols::Namer, event: &mut Event) {
        namer.apply(event, &mut SourceNames(self));
    }
    fn size(&self) -> Option<u64> {
        match self {
            Source::Text(_, n) if *n > 0 => Some(*n),
            _ => None,
        }
    }
}

/// A source's table as the naming step uses it: interning through the decoder keeps
/// the text decoder's symbol cache.
struct SourceNames<'a>(&'a mut Source);

impl ptscope_symbols::NameTable for SourceNames<'_> {
    fn strings(&self) -> &StringTable {
        self.0.strings()
    }
    fn intern(&mut self, name: &str) -> ptscope_event::Sym {
        match &mut *self.0 {
            Source::Text(d, _) => d.intern(name),
            Source::Perf(p) => p.strings_mut().intern(name),
            Source::Emulate(e) => e.strings_mut().intern(name),
        }
    }
    fn intern_stack(&mut self, frames: &[ptscope_event::Location]) -> ptscope_event::StackHandle {
        let frames = frames.iter().copied();
        match &mut *self.0 {
            Source::Text(d, _) => d.intern_stack(frames),
            Source::Perf(p) => p.strings_mut().intern_stack(frames),
            Source::Emulate(e) => e.strings_mut().intern_stack(frames),
        }
    }
}

/// What each input is: its name for messages, and how to open it.
enum InputSpec {
    Text(PathBuf),
    PerfData(PathBuf),
    /// An emulate working directory, the program's name for its threads, which
    /// snapshot (one per trigger hit, else one), and the clock its times follow.
    Emulate(PathBuf, String, usize, ptscope_emulate::ClockKind),
}

impl InputSpec {
    fn name(&self) -> String {
        match self {
            InputSpec::Text(p) if p == Path::new("-") => "standard input".into(),
            InputSpec::Text(p) | InputSpec::PerfData(p) | InputSpec::Emulate(p, _, _, _) => {
                p.display().to_string()
            }
        }
    }

    /// Opens the input, interning into `strings` so names stay valid across snapshots.
    fn open(
        &self,
        perf: &Path,
        choice: Choice,
        no_inline: bool,
        strings: StringTable,
    ) -> Result<Source> {
        match self {
            InputSpec::Text(p) if p == Path::new("-") => {
                let r: Box<dyn Read + Send> = Box::new(io::stdin());
                Ok(Source::Text(
                    Box::new(Decoder::with_strings(
                        BufReader::with_capacity(1 << 20, r),
                        strings,
                    )),
                    0,
                ))
            }
            InputSpec::Text(p) => {
                let f = File::open(p)
                    .with_context(|| format!("cannot open perf script text {}", p.display()))?;
                let size = f.metadata().map(|m| m.len()).unwrap_or(0);
                let r: Box<dyn Read + Send> = Box::new(f);
                Ok(Source::Text(
                    Box::new(Decoder::with_strings(
                        BufReader::with_capacity(1 << 20, r),
                        strings,
                    )),
                    size,
                ))
            }
            InputSpec::PerfData(p) => {
                let mut opts = DlfilterOptions::new(p);
                opts.perf = perf.to_path_buf();
                let kind = ptscope_decode::perf::detect_recording_kind(perf, p)
                    .with_context(|| format!("cannot decode {}", p.display()))?;
                opts.kind = Some(kind);
                // Jumps within a function change no stack, but their timestamps bound how
                // far calls are spread in time: keep them so both paths give one trace.
                opts.keep_jumps = kind == RecordingKind::IntelPt;
                if no_inline {
                    opts.extra_args.push("--no-inline".into());
                }
                let (script, notice) = ptscope_dlfilter_reader::open(&opts, strings, choice)
                    .with_context(|| format!("cannot decode {}", p.display()))?;
                if let Some(n) = notice {
                    crate::messages::info(n.trim_start_matches("ptscope: "));
                }
                Ok(Source::Perf(Box::new(script)))
            }
            InputSpec::Emulate(dir, comm, snapshot, clock) => {
                let events = ptscope_emulate::Trace::open(dir, comm, *snapshot, strings, *clock)?;
                for i in events.infos() {
                    crate::messages::info(i);
                }
                Ok(Source::Emulate(Box::new(events)))
            }
        }
    }
}

fn input_specs(args: &DecodeArgs) -> Result<Vec<InputSpec>> {
    if let Some(p) = &args.perf_script {
        if p != Path::new("-") && !p.exists() {
            bail!(
                "{}: no such file (expected `perf script` text; use `-` to read standard input)",
                p.display()
            );
        }
        return Ok(vec![InputSpec::Text(p.clone())]);
    }
    let input = args
        .input
        .clone()
        .unwrap_or_else(|| PathBuf::from("perf.data"));
    if input.is_dir() && input.join(ptscope_emulate::LOG_NAME).is_file() {
        let comm = args
            .executable
            .as_deref()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "emulated".into());
        // One input per snapshot: each trigger hit's, or the whole recording's.
        let n = ptscope_emulate::process::snapshot_count(&input)?;
        let clock = args.clock.map(Into::into).unwrap_or_default();
        return Ok((0..n)
            .map(|i| InputSpec::Emulate(input.clone(), comm.clone(), i, clock))
            .collect());
    }
    if let Some(c) = args.clock {
        bail!(
            "--clock {} applies to recordings of the emulate backend only: {} is not one \
             (perf recordings carry perf's own timestamps); drop --clock",
            ptscope_emulate::ClockKind::from(c).name(),
            input.display()
        );
    }
    if input.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&input)
            .with_context(|| format!("cannot read directory {}", input.display()))?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("perf.data") && !n.ends_with(".old"))
                    && p.is_file()
            })
            .collect();
        files.sort();
        if files.is_empty() {
            bail!(
                "{}: no perf.data files in this directory (expected a ptscope working directory)",
                input.display()
            );
        }
        return Ok(files.into_iter().map(InputSpec::PerfData).collect());
    }
    if !input.exists() {
        bail!(
            "{}: no such file. Give a perf.data file, a working directory, or --perf-script FILE",
            input.display()
        );
    }
    Ok(vec![InputSpec::PerfData(input)])
}

fn read_ocaml_info(path: &Path) -> Result<OcamlExceptionInfo> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read OCaml exception info {}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .with_context(|| format!("{}: not valid TOML", path.display()))?;
    let t = table
        .get("ocaml_exception_info")
        .and_then(|v| v.as_table())
        .unwrap_or(&table);
    let list = |key: &str| -> Result<Vec<u64>> {
        match t.get(key) {
            None => Ok(Vec::new()),
            Some(v) => v
                .as_array()
                .with_context(|| format!("{}: `{key}` must be an array", path.display()))?
                .iter()
                .map(|x| {
                    x.as_integer().map(|i| i as u64).with_context(|| {
                        format!("{}: `{key}` must hold integer addresses", path.display())
                    })
                })
                .collect(),
        }
    };
    Ok(OcamlExceptionInfo::new(
        &list("pushtraps")?,
        &list("poptraps")?,
        &list("entertraps")?,
    ))
}

/// A summary of one decode, for the closing message and the exit code.
#[derive(Default)]
struct Totals {
    events: u64,
    lines: u64,
    bytes: u64,
    warnings: u64,
    kept: Vec<Warning>,
    /// Failures that cut the trace short.
    errors: Vec<String>,
    /// Things worth knowing that do not make the trace incomplete.
    notes: Vec<String>,
    /// Instants for the trace's info track ([`Msg::Done`]).
    markers: Vec<(u64, String)>,
    interrupted: bool,
}

fn progress(size: Option<u64>, quiet: bool, name: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
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
    pb.set_message(name.to_string());
    pb
}

/// Writes one event, through the `--filter` range if there is one.
fn feed<S: TraceSink, W: StackWriter<S>>(
    w: &mut W,
    range: &mut Option<RangeFilter>,
    event: &Event,
    strings: &StringTable,
) {
    match range {
        Some(r) => {
            let keep = r.should_write(event, strings);
            w.write_event_filtered(event, keep, strings);
        }
        None => w.write_event(event, strings),
    }
}

/// The trace's time 0: the first time of an event that is not side-band (a thread
/// name, a context switch).
fn first_time(held: &[Event], next: &Event) -> u64 {
    held.iter()
        .chain(std::iter::once(next))
        .find(|e| !e.is_sideband())
        .or(held.first())
        .and_then(Event::time)
        .unwrap_or(0)
}

/// Events held back while looking for a PIE executable's load bias.
const MAX_HELD: usize = 100_000;

/// What the executable adds to a writer's configuration.
struct Extras {
    ocaml_exception_info: Option<OcamlExceptionInfo>,
    debug_info: rustc_hash::FxHashMap<u64, ptscope_event::SourcePosition>,
    /// Every event is exactly timed (an emulate recording): see `SegmentsConfig`.
    exact_times: bool,
}

fn extras(
    exe: &Option<crate::exe::ExeInfo>,
    bias: &mut Option<u64>,
    totals: &mut Totals,
    quiet_if_unused: bool,
) -> Extras {
    let Some(e) = exe else {
        return Extras {
            ocaml_exception_info: None,
            debug_info: Default::default(),
            exact_times: false,
        };
    };
    let b = match *bias {
        Some(b) => b,
        None => {
            if !quiet_if_unused {
                totals.notes.push(
                    "the trace never enters the --executable (no event names its file), so its source positions and OCaml traps are not used".into(),
                );
            }
            *bias = Some(0);
            0
        }
    };
    let (ocaml_exception_info, debug_info) = e.rebased(b);
    Extras {
        ocaml_exception_info,
        debug_info,
        exact_times: false,
    }
}

/// What the decoding thread sends: names new since the last message (so the
/// writer's table mirrors the decoder's, same ids), and events or an end of input.
enum Msg {
    Batch {
        new_strings: Vec<Box<str>>,
        /// Stacks interned since the last batch, in handle order.
        new_stacks: Vec<Box<[ptscope_event::Location]>>,
        events: Vec<Event>,
    },
    /// One input is done (a snapshot boundary).
    Done {
        stats: Stats,
        warnings: Vec<Warning>,
        errors: Vec<String>,
        /// What the decoder wants said (a fallback to text, hidden JIT names).
        notices: Vec<String>,
        /// Instants for the trace's own info track (`(time from the trace's start,
        /// text)`): an emulate trace's clock, its execs.
        markers: Vec<(u64, String)>,
    },
}

/// Events per message: large enough to amortise the channel, small enough to overlap.
const BATCH: usize = 4096;

/// Decodes every input on its own thread, so parsing overlaps stack reconstruction
/// and output (the two cores each get half of the work).
fn decode_inputs(
    specs: Vec<InputSpec>,
    perf: PathBuf,
    (choice, no_inline): (Choice, bool),
    quiet: bool,
    ctx: DecodeContext,
    (naming, fold_kernel): (bool, bool),
    tx: std::sync::mpsc::SyncSender<Msg>,
) {
    let mut strings = StringTable::new();
    // One for the whole run: its caches and counts span the snapshots.
    let mut namer = ptscope_symbols::Namer::new(naming, naming);
    namer.set_fold_kernel(fold_kernel);
    let last = specs.len().saturating_sub(1);
    let mut sent = (0usize, 0usize);
    let flush = |strings: &StringTable, sent: &mut (usize, usize), events: Vec<Event>| {
        let new_strings = (sent.0..strings.len())
            .map(|i| Box::<str>::from(strings.get(ptscope_event::Sym(i as u32))))
            .collect();
        let new_stacks = (sent.1..strings.stack_count())
            .map(|i| (strings.stack(ptscope_event::StackHandle(i as u32)).copied()).collect())
            .collect();
        *sent = (strings.len(), strings.stack_count());
        Msg::Batch {
            new_strings,
            new_stacks,
            events,
        }
    };
    // Summed over the inputs: a rotated recording is several files.
    let mut lost = ptscope_symbols::Lost::default();
    for (index, spec) in specs.into_iter().enumerate() {
        // Said once, with the whole run's counts.
        let cut_notice = |namer: &ptscope_symbols::Namer, lost: &ptscope_symbols::Lost| {
            if index == last {
                namer
                    .cut_notice()
                    .into_iter()
                    .chain(lost_notice(lost))
                    .collect()
            } else {
                Vec::new()
            }
        };
        if ctx.stopped() {
            break;
        }
        // Names come from this machine's files only for its own recordings (perf script
        // text may come from elsewhere); branches need the mappings to be named.
        let maps = match &spec {
            InputSpec::PerfData(p) => ptscope_symbols::Mappings::read(p).ok(),
            _ => None,
        };
        if let Some(m) = &maps {
            lost.add(m.lost());
        }
        namer.set_mappings(maps.filter(|_| naming));
        // A big file is parsed on two threads (a pipe or perf's output cannot be).
        if let InputSpec::Text(p) = &spec {
            let big = p != Path::new("-")
                && std::fs::metadata(p)
                    .is_ok_and(|m| m.is_file() && m.len() >= crate::parallel::MIN_SIZE)
                && crate::parallel::splittable(p);
            if big {
                let size = std::fs::metadata(p).map(|m| m.len()).ok();
                let pb = progress(size, quiet, &spec.name());
                let mut stopped = false;
                let result = crate::parallel::parse_file(
                    p,
                    &mut strings,
                    &|| ctx.stopped(),
                    |bytes| pb.set_position(bytes),
                    |table, mut events| {
                        for e in &mut events {
                            namer.apply(e, table);
                        }
                        let ok = tx.send(flush(table, &mut sent, events)).is_ok();
                        stopped |= !ok;
                        ok
                    },
                );
                pb.finish_and_clear();
                if stopped {
                    return;
                }
                let msg = match result {
                    Ok(out) => Msg::Done {
                        stats: out.stats,
                        warnings: out.warnings,
                        errors: out
                            .error
                            .map(|e| {
                                format!(
                                    "{}: {e} (keeping the events decoded before it)",
                                    spec.name()
                                )
                            })
                            .into_iter()
                            .collect(),
                        notices: cut_notice(&namer, &lost),
                        markers: Vec::new(),
                    },
                    Err(e) => Msg::Done {
                        stats: Stats::default(),
                        warnings: Vec::new(),
                        errors: vec![format!("cannot read {}: {e}", spec.name())],
                        notices: Vec::new(),
                        markers: Vec::new(),
                    },
                };
                if tx.send(msg).is_err() {
                    return;
                }
                continue;
            }
        }
        // A failed open consumes the table it was given; keep a copy so the names
        // already sent stay in step.
        let backup = strings.clone();
        let mut source = match spec.open(&perf, choice, no_inline, std::mem::take(&mut strings)) {
            Ok(s) => s,
            Err(e) => {
                strings = backup;
                let _ = tx.send(Msg::Done {
                    stats: Stats::default(),
                    warnings: Vec::new(),
                    errors: vec![crate::messages::error_text(&e)],
                    notices: Vec::new(),
                    markers: Vec::new(),
                });
                continue;
            }
        };
        let pb = progress(source.size(), quiet, &spec.name());
        let mut errors = Vec::new();
        let mut batch = Vec::with_capacity(BATCH);
        let mut n = 0u64;
        loop {
            if ctx.stopped() {
                break;
            }
            match source.next_event() {
                Ok(Some(mut e)) => {
                    source.name(&mut namer, &mut e);
                    batch.push(e);
                }
                Ok(None) => break,
                Err(e) => {
                    errors.push(format!(
                        "{}: {e} (keeping the events decoded before it)",
                        spec.name()
                    ));
                    break;
                }
            }
            if batch.len() == BATCH {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                if tx.send(flush(source.strings(), &mut sent, full)).is_err() {
                    return;
                }
                n += BATCH as u64;
                match source.size() {
                    Some(_) => pb.set_position(source.decoder_stats().bytes),
                    None => pb.set_position(n),
                }
            }
        }
        if !batch.is_empty() && tx.send(flush(source.strings(), &mut sent, batch)).is_err() {
            return;
        }
        pb.finish_and_clear();
        let stats = source.decoder_stats();
        let warnings = source.warnings();
        let mut notices = Vec::new();
        let mut markers = Vec::new();
        match source {
            Source::Perf(mut p) => {
                if let Err(e) = p.finish() {
                    errors.push(format!("{e} (keeping the events decoded before it)"));
                }
                notices = p.take_notices();
                strings = p.take_strings();
            }
            Source::Text(d, _) => {
                // A field perf script was run without: say which, and how to get it.
                notices.extend(d.missing_fields().iter().map(|m| m.to_string()));
                strings = d.into_strings()
            }
            Source::Emulate(e) => {
                // A log cut short makes the trace incomplete: said, and the exit status shows it.
                errors.extend(e.notices().iter().cloned());
                markers = e.markers();
                strings = e.into_strings()
            }
        }
        notices.extend(cut_notice(&namer, &lost));
        if tx
            .send(Msg::Done {
                stats,
                warnings,
                errors,
                notices,
                markers,
            })
            .is_err()
        {
            return;
        }
    }
}

/// What to tell the user when perf dropped records while recording: the trace has holes
/// that nothing in it shows, and the cause is on the recording side.
fn lost_notice(lost: &ptscope_symbols::Lost) -> Option<String> {
    if !lost.any() {
        return None;
    }
    let what = match (lost.samples, lost.records) {
        (0, r) => format!("{r} records in {} stretches", lost.stretches),
        (s, 0) => format!("{s} samples"),
        (s, r) => format!("{s} samples ({r} records in {} stretches)", lost.stretches),
    };
    Some(format!(
        "perf dropped {what} while recording, because it could not write them out as fast \
         as they came (a busy machine, or heavy samples): the trace has gaps there, and \
         what happened last (a thread's exit, say) may be among them. A lower \
         --timer-resolution, --callgraph fp, or a less loaded machine avoids it"
    ))
}

/// Feeds every input through one writer, snapshot by snapshot.
fn drive<S: TraceSink, W: StackWriter<S>>(
    specs: Vec<InputSpec>,
    args: &DecodeArgs,
    sink: S,
    make_writer: impl FnOnce(S, u64, Extras) -> W,
    on_end_of_input: impl FnOnce(&mut S),
    totals: &mut Totals,
    (ctx, scope): (DecodeContext, TraceScope),
) -> Result<(S, StringTable)> {
    let exe = match &args.executable {
        Some(p) => Some(crate::exe::ExeInfo::load(p)?),
        None => None,
    };
    // A PIE's addresses are known only once an event inside it reveals the load bias.
    let mut bias: Option<u64> = match &exe {
        Some(e) if e.pie => None,
        _ => Some(0),
    };
    let mut held: Vec<Event> = Vec::new();
    let marker = args
        .input
        .as_ref()
        .filter(|d| d.is_dir())
        .map(|d| d.join(ptscope_record::session::ROTATED_FILES_MARKER));
    let rotated = marker.as_ref().is_some_and(|m| m.exists());
    // With --multi-snapshot sampling the marker names the files that end a snapshot.
    let ends_snapshot: Vec<bool> = {
        let ends = marker
            .as_ref()
            .and_then(|m| std::fs::read_to_string(m).ok())
            .unwrap_or_default();
        let ends: std::collections::HashSet<&str> = ends.lines().collect();
        specs
            .iter()
            .map(|s| match s {
                InputSpec::PerfData(p) => p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| ends.contains(n)),
                _ => false,
            })
            .collect()
    };
    let demangle = !args.no_demangle && args.format == Format::Fxt;
    // Transcripts stay comparable with magic-trace's: perf's names and stacks as printed.
    let naming = args.format == Format::Fxt;
    // A user-space trace shows a sample's time in the kernel as one `[kernel: …]` frame.
    let fold_kernel = naming && scope == TraceScope::Userspace;
    let mut range = args.filter.as_ref().map(|(start, stop)| RangeFilter {
        start: start.clone(),
        stop: stop.clone(),
        inside: false,
        seen_start: false,
        seen_stop: false,
    });
    let perf = args
        .perf
        .clone()
        .unwrap_or_else(ptscope_decode::perf::default_perf);
    let inputs = specs.len();
    let all_text = specs.iter().all(|s| matches!(s, InputSpec::Text(_)));
    let exact_times = specs.iter().all(|s| matches!(s, InputSpec::Emulate(..)));
    let (tx, rx) = std::sync::mpsc::sync_channel(8);
    let quiet = args.quiet || crate::messages::quiet();
    let choice = match args.decoder {
        DecoderKind::Auto => Choice::Auto,
        DecoderKind::Dlfilter => Choice::Dlfilter,
        DecoderKind::Text => Choice::Text,
    };
    let reading = (choice, args.no_inline);
    let decoder = std::thread::Builder::new()
        .name("ptscope-decode".into())
        .spawn(move || decode_inputs(specs, perf, reading, quiet, ctx, (naming, fold_kernel), tx))
        .context("cannot start the decoding thread")?;
    let mut writer: Option<W> = None;
    let mut pending = Some((sink, make_writer));
    let mut strings = StringTable::new();
    let mut done = 0;
    let mut stopping = false;
    loop {
        // Polled, so an interrupt stops the decode even while perf prints nothing (it can
        // think for seconds before its first line): perf is ended, the decoding thread
        // sees its input end, and what it had decoded still arrives and is written.
        let msg = match rx.recv_timeout(std::time::Duration::from_millis(50)) {
            Ok(m) => m,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if ctx.stopped() && !stopping {
                    stopping = true;
                    ptscope_decode::perf::stop_all();
                }
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        match msg {
            Msg::Batch {
                new_strings,
                new_stacks,
                events,
            } => {
                for s in &new_strings {
                    let sym = strings.intern(s);
                    if demangle {
                        if let std::borrow::Cow::Owned(d) = ptscope_symbols::demangle(s) {
                            strings.set_display(sym, &d);
                        }
                    }
                }
                // In order, so they get the handles they have in the decoder's table.
                for frames in &new_stacks {
                    strings.intern_stack(frames.iter().copied());
                }
                for event in events {
                    // A trigger's snapshot ends at the hit: samples perf took while ptscope
                    // was still stopping the program are after the moment asked for.
                    if ctx
                        .end_at
                        .is_some_and(|t| event.time().is_some_and(|et| et > t))
                    {
                        continue;
                    }
                    if writer.is_none() {
                        if bias.is_none() {
                            bias = exe.as_ref().and_then(|e| e.bias_from(&event, &strings));
                        }
                        // Thread names (perf's are at time 0 for threads that existed
                        // before recording) must not decide where the trace starts.
                        if (bias.is_none() || event.is_sideband()) && held.len() < MAX_HELD {
                            held.push(event);
                            continue;
                        }
                        let Some((sink, make)) = pending.take() else {
                            break;
                        };
                        let first = first_time(&held, &event);
                        let w = writer.insert(make(
                            sink,
                            first,
                            Extras {
                                exact_times,
                                ..extras(&exe, &mut bias, totals, ctx.executable_implied)
                            },
                        ));
                        for e in held.drain(..) {
                            feed(w, &mut range, &e, &strings);
                        }
                    }
                    if let Some(w) = writer.as_mut() {
                        feed(w, &mut range, &event, &strings);
                    }
                }
            }
            Msg::Done {
                stats,
                warnings,
                errors,
                notices,
                markers,
            } => {
                totals.notes.extend(notices);
                // Several snapshots each name the clock: it is shown once.
                for m in markers {
                    if !totals.markers.iter().any(|x| x.1 == m.1) {
                        totals.markers.push(m);
                    }
                }
                totals.events += stats.events;
                totals.lines += stats.lines;
                totals.bytes += stats.bytes;
                totals.warnings += stats.warnings;
                // perf ended by an interrupt is no failure: the interrupt is reported.
                if !ctx.stopped() {
                    totals.errors.extend(errors);
                }
                for w in warnings {
                    if totals.kept.len() < 5 {
                        totals.kept.push(w);
                    }
                }
                done += 1;
                // Each perf.data file is one snapshot: close its frames before the next,
                // unless the files are the pieces of one rotated sampling recording (and
                // this one does not end one of its snapshots).
                if done < inputs && (!rotated || ends_snapshot[done - 1]) {
                    if let Some(w) = writer.as_mut() {
                        w.end_snapshot(&strings);
                    }
                }
            }
        }
    }
    // Names alone (a recording without samples) are not a trace: that stays an error.
    if writer.is_none() && held.iter().any(|e| !e.is_sideband()) {
        if let Some((sink, make)) = pending.take() {
            let first = first_time(&held, &held[0]);
            let w = writer.insert(make(
                sink,
                first,
                Extras {
                    exact_times,
                    ..extras(&exe, &mut bias, totals, ctx.executable_implied)
                },
            ));
            for e in held.drain(..) {
                feed(w, &mut range, &e, &strings);
            }
        }
    }
    if decoder.join().is_err() {
        totals
            .errors
            .push("the decoding thread failed; the trace holds what was decoded before".into());
    }
    totals.interrupted = ctx.stopped();
    // A filter or trigger that never matched is no error, but must not pass unsaid.
    if let Some(note) = range.as_ref().and_then(|r| r.note(&strings)) {
        totals.notes.push(note);
    }
    if let Some(t) = &args.missed_trigger {
        totals.notes.push(format!(
            "the trigger `{t}` was never hit{}",
            similar_names(&strings, t)
        ));
    }
    match writer {
        Some(mut w) => {
            on_end_of_input(w.sink_mut());
            let sink = w.finish(&strings);
            Ok((sink, strings))
        }
        None => {
            let mut msg = String::from("no events were decoded");
            if totals.interrupted {
                msg.push_str(" before decoding was interrupted");
            }
            if !held.is_empty() {
                msg.push_str(
                    "\n  perf named the recorded threads but has no samples of them: they \
                     never ran while recording (--single-thread records only the given \
                     thread, not the threads and processes it starts)",
                );
            }
            for e in totals.errors.iter().chain(&totals.notes) {
                msg.push_str(&format!("\n  {e}"));
            }
            if totals.warnings > 0 {
                msg.push_str(&format!(
                    "\n  {} of {} lines were not understood as perf script output, e.g.:",
                    totals.warnings, totals.lines
                ));
                for w in &totals.kept {
                    msg.push_str(&format!("\n    {w}"));
                }
            } else if totals.errors.is_empty() && !totals.interrupted {
                msg.push_str(if totals.bytes == 0 && totals.lines == 0 && all_text {
                    "\n  the input is empty"
                } else if all_text {
                    "\n  the input holds no samples or branches perf script printed"
                } else {
                    "\n  perf found no samples or branches in the recording (a program that \
                     ends within a few milliseconds may never be sampled)"
                });
            }
            bail!(msg)
        }
    }
}

fn report(totals: &Totals) {
    for e in &totals.notes {
        crate::messages::warn(e);
    }
    if totals.warnings > 0 {
        let mut m = format!(
            "{} line(s) of perf output were not understood and were skipped; the first:",
            totals.warnings
        );
        for w in &totals.kept {
            m.push_str(&format!("\n  {w}"));
        }
        crate::messages::warn(m);
    }
}

/// Runs the chosen stack writer over every input.
fn run_writer<S: TraceSink>(
    specs: Vec<InputSpec>,
    args: &DecodeArgs,
    config: LegacyConfig,
    sink: S,
    on_end: impl FnOnce(&mut S),
    totals: &mut Totals,
    ctx: DecodeContext,
) -> Result<(S, StringTable)> {
    // One snapshot taken at a trigger hit ends at that hit (several are multi-snapshot).
    let end_at = match (specs.len(), config.hits.as_slice()) {
        (1, [.., last]) if last.time > 0 => Some(last.time),
        _ => None,
    };
    let ctx = DecodeContext { end_at, ..ctx };
    let scope = config.scope;
    // Both writers take the same options; what only the input knows is added per input.
    let config_for = move |earliest_time, x: Extras| LegacyConfig {
        earliest_time,
        ocaml_exception_info: config
            .ocaml_exception_info
            .clone()
            .or(x.ocaml_exception_info),
        debug_info: x.debug_info,
        ..config.clone()
    };
    match args.writer {
        WriterKind::Legacy => drive(
            specs,
            args,
            sink,
            |sink, earliest_time, x: Extras| LegacyWriter::new(sink, config_for(earliest_time, x)),
            on_end,
            totals,
            (ctx, scope),
        ),
        WriterKind::Segments => drive(
            specs,
            args,
            sink,
            |sink, earliest_time, x: Extras| {
                let exact_times = x.exact_times;
                SegmentsWriter::new(
                    sink,
                    SegmentsConfig {
                        exact_times,
                        ..config_for(earliest_time, x).into()
                    },
                )
            },
            on_end,
            totals,
            (ctx, scope),
        ),
    }
}

/// Runs `ptscope decode` and turns its report into an exit status.
pub fn command(args: DecodeArgs) -> Result<i32> {
    crate::messages::set_quiet(args.quiet);
    ptscope_interrupt::install().context("cannot install the Ctrl-C handler")?;
    let ctx = DecodeContext::standalone();
    ptscope_interrupt::say_at(
        ctx.stop_at,
        "ptscope: interrupted; writing what was decoded so far (Ctrl-C again to quit without writing)",
    );
    ptscope_interrupt::set_quit(
        ctx.stop_at + 1,
        "ptscope: interrupted again; quitting without writing the trace",
    );
    let report = run(&args, ctx)?;
    Ok(exit_status(&report))
}

/// 130 (as for a Ctrl-C'd program) when interrupted, 1 when the trace is incomplete.
pub fn exit_status(report: &Report) -> i32 {
    if report.interrupted {
        130
    } else if !report.incomplete.is_empty() {
        1
    } else {
        0
    }
}

/// The scope a sampling recording was made with, so `ptscope decode DIR` of a
/// `run --trace-include-kernel` recording keeps its kernel frames.
fn recorded_scope(specs: &[InputSpec], args: &DecodeArgs) -> Option<TraceScope> {
    let InputSpec::PerfData(p) = specs.first()? else {
        return None;
    };
    let perf = args
        .perf
        .clone()
        .unwrap_or_else(ptscope_decode::perf::default_perf);
    ptscope_decode::perf::recorded_scope(&perf, p)
}

/// Writes `markers` as instants on a track of their own ("ptscope" / "trace info"), where
/// a Perfetto user sees them beside the threads: what clock an emulate trace's times
/// follow, and where a thread exec'd out of the trace.
fn info_track<S: ptscope_stacks::TraceSink>(sink: &mut S, markers: &[(u64, String)]) {
    if markers.is_empty() {
        return;
    }
    let pid = sink.allocate_pid("ptscope");
    let track = sink.allocate_thread(pid, "trace info");
    for (time, text) in markers {
        sink.duration_instant(track, text, i64::try_from(*time).unwrap_or(i64::MAX), &[]);
    }
}

/// Decodes as `args` say; the trace is written even when incomplete (the report says why).
pub fn run(args: &DecodeArgs, ctx: DecodeContext) -> Result<Report> {
    let specs = input_specs(args)?;
    let ocaml_exception_info = match &args.ocaml_exception_info {
        Some(p) => Some(read_ocaml_info(p)?),
        None => None,
    };
    // A working directory from `ptscope run -w DIR` also holds the trigger hits.
    let hits = match &args.input {
        Some(dir) if dir.is_dir() => ptscope_record::hits::read(dir),
        _ => Vec::new(),
    };
    let scope = match args.scope {
        Some(s) => s,
        None => recorded_scope(&specs, args).unwrap_or_default(),
    };
    let config = LegacyConfig {
        scope,
        annotate_inferred_start_times: args.format == Format::Transcript,
        ocaml_exception_info,
        hits,
        ..LegacyConfig::default()
    };
    let mut totals = Totals::default();
    match args.format {
        Format::Transcript => {
            let (sink, _) = run_writer(
                specs,
                args,
                config,
                TranscriptSink::default(),
                |s| s.end_of_input(),
                &mut totals,
                ctx,
            )?;
            report(&totals);
            let text = sink.render();
            if args.output == Path::new("-") {
                io::stdout()
                    .lock()
                    .write_all(text.as_bytes())
                    .context("writing the transcript to standard output")?;
            } else {
                let mut out = ptscope_output::open_trace_output(&args.output)
                    .with_context(|| format!("cannot create {}", args.output.display()))?;
                out.write_all(text.as_bytes())
                    .and_then(|()| out.finish())
                    .with_context(|| format!("cannot write {}", args.output.display()))?;
            }
        }
        Format::Fxt => {
            let out = ptscope_output::open_trace_output(&args.output)
                .with_context(|| format!("cannot create {}", args.output.display()))?;
            let fxt = ptscope_output::FxtSink::new(out);
            // An error here means nothing usable was read; the temporary output is
            // dropped with it and nothing appears at -o.
            let sink = if args.writer == WriterKind::Legacy {
                // The legacy writer emits inferred frames late; restore per-thread time
                // order. The segments writer writes in order already.
                run_writer(
                    specs,
                    args,
                    config,
                    OrderedSink::new(fxt),
                    |_| {},
                    &mut totals,
                    ctx,
                )
                .and_then(|(s, _)| Ok(s.finish()?))?
            } else {
                run_writer(specs, args, config, fxt, |_| {}, &mut totals, ctx).map(|(s, _)| s)?
            };
            let mut sink = sink;
            info_track(&mut sink, &totals.markers);
            sink.finish_output()
                .with_context(|| format!("writing {}", args.output.display()))?;
            report(&totals);
        }
    }
    for e in &totals.errors {
        crate::messages::warn(format!("the trace is incomplete: {e}"));
    }
    if totals.interrupted {
        crate::messages::warn(format!(
            "decoding was interrupted; the trace holds the {} events decoded before",
            totals.events
        ));
    }
    if args.output != Path::new("-") {
        crate::messages::info(format!(
            "wrote {} ({} events); open it at https://ui.perfetto.dev",
            args.output.display(),
            totals.events
        ));
    }
    Ok(Report {
        incomplete: totals.errors,
        interrupted: totals.interrupted,
    })
}
