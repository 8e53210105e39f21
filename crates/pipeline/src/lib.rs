//! ptscope's decode pipeline: inputs (perf.data files, working directories, `perf
//! script` text, emulate recordings) in, a trace (Fuchsia Trace Format, or magic-trace's
//! test transcript) out.
//!
//! The stages: each input is opened as an [`EventSource`] (the text decoder, perf with
//! ptscope's dlfilter, an emulate recording) on a decoding thread, which names its
//! events ([`ptscope_symbols::Namer`]) and sends them in batches; the writer's side
//! demangles, holds events back until a PIE's load bias is known, applies the
//! `--filter` range, closes each snapshot, and drives the chosen stack writer into the
//! output. Nothing is printed: progress and messages go to an [`Observer`], problems come
//! back as an [`Error`] or in the [`Report`].
//!
//! ```
//! use ptscope_pipeline::{decode, DecodeOptions, Format, Input, Quiet, WriterKind};
//!
//! // magic-trace's hello-world test: `perf script` text of a C program's start.
//! let text = include_str!("../../../tests/fixtures/magic-trace/hello_world_userspace/input.perf");
//! let dir = tempfile::tempdir()?;
//! let input = dir.path().join("input.perf");
//! std::fs::write(&input, text)?;
//!
//! let mut options = DecodeOptions::new(Input::PerfScript(input));
//! options.format = Format::Transcript;
//! options.writer = WriterKind::Legacy;
//! options.output = dir.path().join("transcript.txt");
//! let report = decode(&options, &Quiet)?;
//! assert!(report.incomplete.is_empty() && report.notices.is_empty());
//!
//! // The legacy writer rebuilds the stacks exactly as magic-trace does.
//! let transcript = std::fs::read_to_string(&options.output)?;
//! let expected = include_str!("../../../tests/fixtures/magic-trace/hello_world_userspace/expected.txt");
//! assert_eq!(transcript, expected);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

mod drive;
mod exact;
mod exe;
mod inputs;
mod names;
mod parallel;
mod thread;

pub use names::nearest_names;
pub use ptscope_decode::Warning;
pub use ptscope_emulate::ClockKind;
pub use ptscope_event::EventSource;
pub use ptscope_output::filter::{FilterStats, OutputFilter};

use drive::Totals;
use ptscope_event::{Event, StringTable, TraceScope};
use ptscope_output::filter::FilterSink;
use ptscope_stacks::ordered::OrderedSink;
use ptscope_stacks::transcript::TranscriptSink;
use ptscope_stacks::WriterConfig;
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// What to decode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// A perf.data file, a working directory holding perf.data files (one per snapshot),
    /// or an emulate recording's working directory.
    Recording(PathBuf),
    /// A file of `perf script` text (`-` for standard input).
    PerfScript(PathBuf),
}

/// Stack writers to choose from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum WriterKind {
    /// magic-trace's streaming writer, reproduced exactly (the reference).
    Legacy,
    /// Whole segments rebuilt in memory and stitched across decode errors.
    Segments,
}

/// Output formats.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    /// Fuchsia Trace Format, for the Perfetto UI.
    Fxt,
    /// magic-trace's test transcript (`-> TIME BEGIN name` lines).
    Transcript,
}

/// Decode paths for perf.data files.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum DecoderKind {
    /// Intel PT recordings: ptscope's own decoder, or perf's (dlfilter, else text) with
    /// a notice when it cannot decode one; other recordings: the dlfilter if this perf
    /// can load it, else text (with a one-line notice).
    Auto,
    /// ptscope's own Intel PT decoder (no perf), or an error saying why not.
    Builtin,
    /// The dlfilter, or an error saying why not.
    Dlfilter,
    /// `perf script` text.
    Text,
}

/// Everything a decode needs to know.
#[derive(Clone, Debug)]
pub struct DecodeOptions {
    /// What to decode.
    pub input: Input,
    /// Where to write the trace (`.fxt.gz` is gzipped, `.fxt` raw, `-` stdout).
    pub output: PathBuf,
    /// What to show; `None` is what a sampling recording's event counted, else user space.
    pub scope: Option<TraceScope>,
    /// Which stack reconstruction to use.
    pub writer: WriterKind,
    /// Output format.
    pub format: Format,
    /// A TOML file of OCaml exception trap addresses.
    pub ocaml_exception_info: Option<PathBuf>,
    /// Keep only what happens from a call to the first function until the next call to
    /// the second.
    pub filter: Option<(String, String)>,
    /// A trigger function that was never hit, for a notice naming similar functions.
    pub missed_trigger: Option<String>,
    /// Show Rust, C++ and OCaml names demangled (traces only: transcripts never are).
    pub demangle: bool,
    /// Name sampled frames by perf's symbol table, without frames for the calls inlined
    /// there.
    pub no_inline: bool,
    /// Let perf expand inlined calls (its `addr2line` lookup) instead of the naming step
    /// reading them from DWARF: slow, for comparing with perf's own output.
    pub perf_inline: bool,
    /// The traced executable, for source positions and OCaml exception traps.
    pub executable: Option<PathBuf>,
    /// The executable was not named by the user but taken from `ptscope run`: a trace
    /// that never enters it (a program that exited at once) needs no notice.
    pub executable_implied: bool,
    /// How to read perf.data files.
    pub decoder: DecoderKind,
    /// The perf binary to run.
    pub perf: PathBuf,
    /// The clock an emulate recording's times follow (emulate recordings only).
    pub clock: Option<ClockKind>,
    /// What of the trace to keep (a window, a depth, a shortest slice): for a trace too
    /// large to open, on every backend.
    pub output_filter: OutputFilter,
    /// Show frames that decode errors leave unproven as one marker frame instead of
    /// guessing they survived ([`WriterConfig::mark_unknown_frames`]; segments writer;
    /// on by default).
    pub mark_unknown_frames: bool,
}

impl DecodeOptions {
    /// Options to decode `input` into `trace.fxt.gz` as `ptscope decode` does by default.
    pub fn new(input: Input) -> Self {
        DecodeOptions {
            input,
            output: PathBuf::from("trace.fxt.gz"),
            scope: None,
            writer: WriterKind::Segments,
            format: Format::Fxt,
            ocaml_exception_info: None,
            filter: None,
            missed_trigger: None,
            demangle: true,
            no_inline: false,
            perf_inline: false,
            executable: None,
            executable_implied: false,
            decoder: DecoderKind::Auto,
            perf: ptscope_decode::perf::default_perf(),
            clock: None,
            output_filter: OutputFilter::default(),
            mark_unknown_frames: true,
        }
    }

    /// The working directory the recording is in, if it is one.
    fn recording_dir(&self) -> Option<&Path> {
        match &self.input {
            Input::Recording(p) if p.is_dir() => Some(p),
            _ => None,
        }
    }
}

/// Who hears how a decode is going: progress, messages as they happen, and whether to
/// stop. Every method has a default that does nothing.
pub trait Observer: Sync {
    /// Decoding of `input` (its name in messages) began; `size` is its length in bytes
    /// when known, else progress counts events.
    fn started(&self, _input: &str, _size: Option<u64>) {}
    /// Bytes (or events, without a size) of the current input done so far.
    fn advanced(&self, _position: u64) {}
    /// The current input is done.
    fn finished(&self) {}
    /// Something worth saying as it happens (a fallback to the text path, the clock an
    /// emulate trace follows).
    fn info(&self, _text: &str) {}
    /// A stack writer's warning about the trace (a decode error perf reported, and
    /// where), as it is met; worth showing even to a user who asked for quiet.
    fn warning(&self, _text: &str) {}
    /// True once decoding should stop (an interrupt): what was decoded is still written.
    fn stopped(&self) -> bool {
        false
    }
}

/// An [`Observer`] that hears nothing and never stops.
pub struct Quiet;

impl Observer for Quiet {}

/// Something the user should know about a trace that is not an error.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
    /// The `--filter` range never opened: the trace is empty.
    FilterNeverStarted {
        /// The function that opens the range.
        start: String,
        /// Names in the trace like it.
        similar: Vec<String>,
    },
    /// The `--filter` range never closed: the trace runs to the end.
    FilterNeverStopped {
        /// The function that opens the range.
        start: String,
        /// The function that closes it.
        stop: String,
        /// Names in the trace like `stop`.
        similar: Vec<String>,
    },
    /// A trigger function was never hit.
    TriggerNeverHit {
        /// The trigger.
        trigger: String,
        /// Names in the trace like it.
        similar: Vec<String>,
    },
    /// No event names the executable's file, so its facts were not used.
    ExecutableNeverEntered,
    /// What an input's source said (a fallback, a field perf script lacked, hidden JIT
    /// names, records perf dropped).
    Source(String),
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use names::similar_suffix;
        match self {
            Notice::FilterNeverStarted { start, similar } => write!(
                f,
                "--filter: no call to `{start}` was seen, so the trace is empty{}",
                similar_suffix(similar)
            ),
            Notice::FilterNeverStopped {
                start,
                stop,
                similar,
            } => write!(
                f,
                "--filter: `{stop}` was never called after `{start}`, so the trace runs to the end{}",
                similar_suffix(similar)
            ),
            Notice::TriggerNeverHit { trigger, similar } => write!(
                f,
                "the trigger `{trigger}` was never hit{}",
                similar_suffix(similar)
            ),
            Notice::ExecutableNeverEntered => f.write_str(
                "the trace never enters the --executable (no event names its file), so its source positions and OCaml traps are not used",
            ),
            Notice::Source(text) => f.write_str(text),
        }
    }
}

/// Why nothing was decoded, with what is known about it.
#[derive(Clone, Debug)]
pub struct NoEvents {
    /// An interrupt stopped decoding.
    pub interrupted: bool,
    /// perf named threads but recorded nothing of them.
    pub names_only: bool,
    /// The recording followed only the given threads (`--single-thread`, `perf record
    /// -t`), not what they started.
    pub per_thread: bool,
    /// Failures and notices, as text.
    pub causes: Vec<String>,
    /// Lines not understood as perf script output.
    pub skipped_lines: u64,
    /// Lines read.
    pub lines: u64,
    /// The first lines not understood.
    pub first_skipped: Vec<Warning>,
    /// Every input was `perf script` text.
    pub all_text: bool,
    /// Nothing at all was read.
    pub empty_input: bool,
    /// No input failed.
    pub nothing_failed: bool,
}

impl fmt::Display for NoEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no events were decoded")?;
        if self.interrupted {
            f.write_str(" before decoding was interrupted")?;
        }
        if self.names_only && self.interrupted {
            f.write_str(
                "\n  perf had handed over the recorded threads' names but none of their \
                 samples yet (it writes its output in blocks; with a slow decode, the first \
                 block can take a while)",
            )?;
        } else if self.names_only && self.nothing_failed {
            f.write_str(
                "\n  perf named the recorded threads but has no samples of them: they \
                 never ran while recording",
            )?;
            if self.per_thread {
                f.write_str(
                    " (--single-thread records only the given thread, not the threads and \
                     processes it starts)",
                )?;
            }
        }
        for e in &self.causes {
            write!(f, "\n  {e}")?;
        }
        if self.skipped_lines > 0 {
            write!(
                f,
                "\n  {} of {} lines were not understood as perf script output, e.g.:",
                self.skipped_lines, self.lines
            )?;
            for w in &self.first_skipped {
                write!(f, "\n    {w}")?;
            }
        } else if self.nothing_failed && !self.interrupted {
            f.write_str(if self.empty_input && self.all_text {
                "\n  the input is empty"
            } else if self.all_text {
                "\n  the input holds no samples or branches perf script printed"
            } else {
                "\n  perf found no samples or branches in the recording (a program that \
                 ends within a few milliseconds may never be sampled)"
            })?;
        }
        Ok(())
    }
}

/// Why a decode failed: nothing usable was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The `perf script` text file does not exist.
    #[error("{}: no such file (expected `perf script` text; use `-` to read standard input)", .0.display())]
    NoSuchScript(PathBuf),
    /// The recording does not exist.
    #[error("{}: no such file. Give a perf.data file, a working directory, or --perf-script FILE", .0.display())]
    NoSuchInput(PathBuf),
    /// A directory without perf.data files.
    #[error("{}: no perf.data files in this directory (expected a ptscope working directory)", .0.display())]
    NoPerfData(PathBuf),
    /// A directory that cannot be listed.
    #[error("cannot read directory {}", path.display())]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A clock was asked for a recording that is not an emulate one.
    #[error("--clock {clock} applies to recordings of the emulate backend only: {} is not one (perf recordings carry perf's own timestamps); drop --clock", input.display())]
    ClockNotEmulate {
        /// The clock asked for.
        clock: &'static str,
        /// The recording.
        input: PathBuf,
    },
    /// An emulate recording cannot be read.
    #[error(transparent)]
    Emulate(anyhow::Error),
    /// A `perf script` text file cannot be opened.
    #[error("cannot open perf script text {}", path.display())]
    OpenText {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The recording's header cannot be read, so its kind is unknown.
    #[error("cannot decode {}", path.display())]
    RecordingKind {
        /// The recording.
        path: PathBuf,
        /// Why.
        #[source]
        source: ptscope_decode::Error,
    },
    /// ptscope's own decoder cannot decode a recording (`--decoder builtin`).
    #[error("cannot decode {} with ptscope's Intel PT decoder (--decoder builtin)", path.display())]
    Builtin {
        /// The recording.
        path: PathBuf,
        /// Why.
        #[source]
        source: ptscope_pt_decode::Error,
    },
    /// `--decoder builtin` on a recording that is not Intel PT.
    #[error("{}: --decoder builtin decodes Intel PT recordings, and this one samples (use --decoder auto, dlfilter or text)", .0.display())]
    BuiltinNotPt(PathBuf),
    /// perf cannot be started on a recording.
    #[error("cannot decode {}", path.display())]
    OpenPerf {
        /// The recording.
        path: PathBuf,
        /// Why.
        #[source]
        source: ptscope_dlfilter_reader::Error,
    },
    /// The OCaml exception info file cannot be read.
    #[error("cannot read OCaml exception info {}", path.display())]
    ReadOcamlInfo {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The OCaml exception info file is not TOML.
    #[error("{}: not valid TOML", path.display())]
    OcamlInfoToml {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: toml::de::Error,
    },
    /// A field of the OCaml exception info file is not an array of integers.
    #[error("{}: `{key}` must {}", path.display(), if *integers { "hold integer addresses" } else { "be an array" })]
    OcamlInfoField {
        /// The file.
        path: PathBuf,
        /// The field.
        key: String,
        /// It is an array, of something else.
        integers: bool,
    },
    /// The executable cannot be read.
    #[error("cannot read the executable {}", path.display())]
    Executable {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: ptscope_symbols::Error,
    },
    /// The executable is not an ELF file this decoder can use.
    #[error("{} is not a usable ELF file", path.display())]
    NotElf {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: ptscope_symbols::Error,
    },
    /// The decoding thread could not be started.
    #[error("cannot start the decoding thread")]
    Thread(#[source] io::Error),
    /// Nothing was decoded.
    #[error("{0}")]
    NoEvents(NoEvents),
    /// The output cannot be created.
    #[error("cannot create {}", path.display())]
    CreateOutput {
        /// The output.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The transcript cannot be written.
    #[error("cannot write {}", path.display())]
    WriteOutput {
        /// The output.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The trace cannot be finished.
    #[error("writing {}", path.display())]
    FinishOutput {
        /// The output.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Restoring the legacy writer's per-thread time order failed.
    #[error(transparent)]
    Reorder(io::Error),
    /// The transcript cannot be written to standard output.
    #[error("writing the transcript to standard output")]
    Stdout(#[source] io::Error),
}

/// How a decode went, besides the trace it wrote.
#[derive(Debug, Default)]
pub struct Report {
    /// Events decoded.
    pub events: u64,
    /// Things worth knowing that do not make the trace incomplete.
    pub notices: Vec<Notice>,
    /// Lines of perf output not understood (and skipped).
    pub skipped_lines: u64,
    /// The first of them.
    pub first_skipped: Vec<Warning>,
    /// Why the trace is not the whole input (perf died, the input was cut short, …).
    pub incomplete: Vec<String>,
    /// An interrupt stopped decoding early.
    pub interrupted: bool,
    /// The trace's size before compression (0 for transcripts).
    pub trace_bytes: u64,
    /// How each process started its program, by pid, in the returned table: for a
    /// stack writer fed the events ([`ptscope_stacks::StackWriter::set_process_start`]).
    pub process_starts: Vec<(u32, ptscope_event::ProcessStart)>,
}

impl From<Totals> for Report {
    fn from(t: Totals) -> Report {
        Report {
            events: t.events,
            notices: t.notes,
            skipped_lines: t.warnings,
            first_skipped: t.kept,
            incomplete: t.errors,
            interrupted: t.interrupted,
            trace_bytes: t.trace_bytes,
            process_starts: t.entries,
        }
    }
}

/// An error and its causes, each said once, joined by `: ` (a cause whose text the
/// message already holds, as io errors repeated by a wrapper, is left out).
pub fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut next = Some(e);
    while let Some(cause) = next {
        let c = cause.to_string();
        next = cause.source();
        if c.is_empty() || text.contains(&c) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&c);
    }
    text
}

/// Decodes as `opts` say and writes the trace, even when incomplete (the report says
/// why); an error means nothing usable was written.
pub fn decode(opts: &DecodeOptions, observer: &dyn Observer) -> Result<Report, Error> {
    let specs = inputs::input_specs(opts)?;
    let ocaml_exception_info = match &opts.ocaml_exception_info {
        Some(p) => Some(inputs::read_ocaml_info(p)?),
        None => None,
    };
    // A working directory from `ptscope run -w DIR` also holds the trigger hits.
    let hits = match opts.recording_dir() {
        Some(dir) => ptscope_record::hits::read(dir),
        None => Vec::new(),
    };
    // The scope `opts` asks for, else (at the writer's start) the one the recording was
    // made with, as its source says, so `ptscope decode DIR` of a `run
    // --trace-include-kernel` recording keeps its kernel frames.
    let config = WriterConfig {
        scope: opts.scope.unwrap_or_default(),
        annotate_inferred_start_times: opts.format == Format::Transcript,
        ocaml_exception_info,
        hits,
        mark_unknown_frames: opts.mark_unknown_frames,
        ..WriterConfig::default()
    };
    let mut totals = Totals::default();
    let output = &opts.output;
    // An emulate recording is exact: its own writer, straight from the block log.
    if opts.writer == WriterKind::Segments {
        if let Some(input) = exact::emulated(&specs) {
            exact::decode(opts, input, observer, &mut totals)?;
            return Ok(totals.into());
        }
    }
    match opts.format {
        Format::Transcript => {
            let sink = write_into(
                specs,
                opts,
                config,
                TranscriptSink::default(),
                false,
                &mut totals,
                observer,
            )?;
            let text = sink.render();
            if output == Path::new("-") {
                io::stdout()
                    .lock()
                    .write_all(text.as_bytes())
                    .map_err(Error::Stdout)?;
            } else {
                let mut out = ptscope_output::open_trace_output(output).map_err(|source| {
                    Error::CreateOutput {
                        path: output.clone(),
                        source,
                    }
                })?;
                out.write_all(text.as_bytes())
                    .and_then(|()| out.finish())
                    .map_err(|source| Error::WriteOutput {
                        path: output.clone(),
                        source,
                    })?;
            }
        }
        Format::Fxt => {
            let out = ptscope_output::open_trace_output(output).map_err(|source| {
                Error::CreateOutput {
                    path: output.clone(),
                    source,
                }
            })?;
            let fxt = ptscope_output::FxtSink::with_warnings(out, |w: &str| observer.warning(w));
            // An error here means nothing usable was read; the temporary output is
            // dropped with it and nothing appears at the output path.
            // The legacy writer emits inferred frames late; restore per-thread time order.
            // The segments writer writes in order already.
            let reorder = opts.writer == WriterKind::Legacy;
            let mut sink = write_into(specs, opts, config, fxt, reorder, &mut totals, observer)?;
            if totals.samples > 0 && totals.branches == 0 {
                // `ptscope report` reads this to mark counts and times as estimates.
                totals
                    .markers
                    .push((0, ptscope_output::SAMPLED_MARKER.to_string()));
            }
            drive::info_track(&mut sink, &totals.markers);
            totals.trace_bytes = sink.finish_output().map_err(|source| Error::FinishOutput {
                path: output.clone(),
                source,
            })?;
        }
    }
    Ok(totals.into())
}

/// Runs the chosen stack writer over every input into `sink`, through the output filter
/// when one is asked for (saying what it left out), restoring each thread's time order
/// before the filter when `reorder`.
fn write_into<S: ptscope_stacks::TraceSink>(
    specs: Vec<inputs::InputSpec>,
    opts: &DecodeOptions,
    config: WriterConfig,
    sink: S,
    reorder: bool,
    totals: &mut Totals,
    observer: &dyn Observer,
) -> Result<S, Error>
where
    S::Thread: std::hash::Hash + Eq,
{
    let f = opts.output_filter;
    Ok(match (reorder, f.is_none()) {
        (false, true) => drive::run_writer(specs, opts, config, sink, totals, observer)?.0,
        (false, false) => {
            let sink = FilterSink::new(sink, f);
            let (s, _) = drive::run_writer(specs, opts, config, sink, totals, observer)?;
            totals.filtered(&f, s.stats());
            s.into_inner()
        }
        (true, true) => {
            let sink = OrderedSink::new(sink);
            let (s, _) = drive::run_writer(specs, opts, config, sink, totals, observer)?;
            s.finish().map_err(Error::Reorder)?
        }
        (true, false) => {
            let sink = OrderedSink::new(FilterSink::new(sink, f));
            let (s, _) = drive::run_writer(specs, opts, config, sink, totals, observer)?;
            let s = s.finish().map_err(Error::Reorder)?;
            totals.filtered(&f, s.stats());
            s.into_inner()
        }
    })
}

/// Decodes `opts`' inputs as [`decode`] does (same sources, same naming, names
/// demangled if `opts.demangle`), but hands each event to `f` with the names so far
/// instead of writing a trace: to measure what the pipeline produces. Returns every
/// event's names and the report.
pub fn for_each_event(
    opts: &DecodeOptions,
    observer: &dyn Observer,
    f: impl FnMut(Event, &StringTable),
) -> Result<(StringTable, Report), Error> {
    let specs = inputs::input_specs(opts)?;
    let reading = drive::reading(opts);
    let mut totals = Totals::default();
    let demangle = opts.demangle && opts.format == Format::Fxt;
    let mut f = f;
    let strings = drive::each_step(
        specs,
        reading,
        demangle,
        observer,
        &mut totals,
        |step, strings, _| {
            if let drive::Step::Event(e) = step {
                f(e.clone(), strings);
            }
        },
    )?;
    Ok((strings, totals.into()))
}

#[cfg(test)]
mod tests {
    use super::NoEvents;

    fn no_events(interrupted: bool, per_thread: bool, nothing_failed: bool) -> String {
        NoEvents {
            interrupted,
            names_only: true,
            per_thread,
            causes: if nothing_failed {
                Vec::new()
            } else {
                vec!["perf made no progress".into()]
            },
            skipped_lines: 0,
            lines: 10,
            first_skipped: Vec::new(),
            all_text: false,
            empty_input: false,
            nothing_failed,
        }
        .to_string()
    }

    /// Names and no samples: the advice fits the recording and what happened (issue 23:
    /// `--single-thread` was suggested after an interrupt of a whole-tree recording).
    #[test]
    fn no_events_says_what_fits_the_recording() {
        let interrupted = no_events(true, false, true);
        assert!(
            interrupted.contains("before decoding was interrupted"),
            "{interrupted}"
        );
        assert!(
            interrupted.contains("none of their samples yet"),
            "{interrupted}"
        );
        assert!(!interrupted.contains("single-thread"), "{interrupted}");
        assert!(!interrupted.contains("never ran"), "{interrupted}");
        let whole_tree = no_events(false, false, true);
        assert!(
            whole_tree.contains("never ran while recording"),
            "{whole_tree}"
        );
        assert!(!whole_tree.contains("single-thread"), "{whole_tree}");
        let one_thread = no_events(false, true, true);
        assert!(
            one_thread.contains("--single-thread records only"),
            "{one_thread}"
        );
        // perf failing is the reason, not the threads.
        let failed = no_events(false, true, false);
        assert!(!failed.contains("never ran"), "{failed}");
        assert!(failed.contains("perf made no progress"), "{failed}");
    }
}
