//! The writer's side: events from the decoding thread through the `--filter` range and
//! the PIE load-bias hold-back into the chosen stack writer, snapshot by snapshot.

use crate::exe::ExeInfo;
use crate::inputs::InputSpec;
use crate::thread::{decode_inputs, Msg, Reading};
use crate::{DecodeOptions, Error, Format, NoEvents, Notice, Observer, WriterKind};
use ptscope_decode::Warning;
use ptscope_event::source::TableDelta;
use ptscope_event::{Event, OcamlExceptionInfo, SourceInfo, StringTable};
use ptscope_stacks::legacy::LegacyWriter;
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::WriterConfig;
use ptscope_stacks::{StackWriter, TraceSink};

/// A summary of one decode, for the closing message and the exit code.
#[derive(Default)]
pub(crate) struct Totals {
    pub events: u64,
    pub lines: u64,
    pub bytes: u64,
    pub warnings: u64,
    pub kept: Vec<Warning>,
    /// Failures that cut the trace short.
    pub errors: Vec<String>,
    /// Things worth knowing that do not make the trace incomplete.
    pub notes: Vec<Notice>,
    /// Instants for the trace's info track ([`Msg::Done`]).
    pub markers: Vec<(u64, String)>,
    /// Sampled call stacks and branches the writer was given: a trace made only of
    /// samples says so on its info track (its slices are estimates).
    pub samples: u64,
    pub branches: u64,
    /// The FXT trace's size before compression.
    pub trace_bytes: u64,
    pub interrupted: bool,
    /// How each process started its program, by pid (the last input's say).
    pub entries: Vec<(u32, ptscope_event::ProcessStart)>,
}

impl Totals {
    /// Says what the output filter left out (nothing vanishes silently).
    pub(crate) fn filtered(&mut self, f: &crate::OutputFilter, st: crate::FilterStats) {
        let n = |v: u64| {
            let s = v.to_string();
            let mut out = String::new();
            for (i, c) in s.chars().enumerate() {
                if i > 0 && (s.len() - i).is_multiple_of(3) {
                    out.push(',');
                }
                out.push(c);
            }
            out
        };
        if f.min_duration > 0 && st.hidden_calls > 0 {
            self.notes.push(Notice::Source(format!(
                "--min-duration left out {} slices shorter than {} ns (with what they called); \
                 each slice that kept its place counts what it hid in its args hidden_calls \
                 and hidden_ns; {} slices were written",
                n(st.hidden_calls),
                f.min_duration,
                n(st.kept)
            )));
        }
        if let Some(d) = f.max_depth {
            if st.too_deep > 0 {
                self.notes.push(Notice::Source(format!(
                    "--max-depth {d} left out {} slices deeper than that; the slices at depth \
                     {d} count them in their args hidden_calls and hidden_ns",
                    n(st.too_deep)
                )));
            }
        }
        if f.window.is_some() && st.outside > 0 {
            self.notes.push(Notice::Source(format!(
                "--window left out {} slices entirely outside it; slices across its edges \
                 are cut there",
                n(st.outside)
            )));
        }
    }

    /// Counts one finished input.
    fn add(&mut self, msg: Msg, observer: &dyn Observer) {
        let Msg::Done {
            stats,
            warnings,
            errors,
            notices,
            markers,
            entries,
        } = msg
        else {
            return;
        };
        self.notes.extend(notices.into_iter().map(Notice::Source));
        self.entries.extend(entries);
        // Several snapshots each name the clock: it is shown once.
        for m in markers {
            if !self.markers.iter().any(|x| x.1 == m.1) {
                self.markers.push(m);
            }
        }
        self.events += stats.events;
        self.lines += stats.lines;
        self.bytes += stats.bytes;
        self.warnings += stats.warnings;
        // perf ended by an interrupt is no failure: the interrupt is reported.
        if !observer.stopped() {
            self.errors.extend(errors);
        }
        for w in warnings {
            if self.kept.len() < 5 {
                self.kept.push(w);
            }
        }
    }
}

/// Interns the names and stacks the decoding thread sent into the writer's table, in
/// order, so they get the handles they have in the decoder's; with `demangle`, a
/// mangled name is shown demangled.
fn intern_new(strings: &mut StringTable, new: &TableDelta, demangle: bool) {
    for s in &new.names {
        let sym = strings.intern(s);
        if demangle {
            if let std::borrow::Cow::Owned(d) = ptscope_symbols::demangle(s) {
                strings.set_display(sym, &d);
            }
        }
    }
    new.mirror(strings);
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
            } => Some(strings.display(strings.location(*dst).symbol)),
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
    fn note(&self, strings: &StringTable) -> Option<Notice> {
        if !self.seen_start {
            return Some(Notice::FilterNeverStarted {
                start: self.start.clone(),
                similar: crate::names::nearest_names(strings, &self.start, 5),
            });
        }
        if !self.seen_stop && self.start != self.stop {
            return Some(Notice::FilterNeverStopped {
                start: self.start.clone(),
                stop: self.stop.clone(),
                similar: crate::names::nearest_names(strings, &self.stop, 5),
            });
        }
        None
    }
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
pub(crate) struct Extras {
    ocaml_exception_info: Option<OcamlExceptionInfo>,
    debug_info: rustc_hash::FxHashMap<u64, ptscope_event::SourcePosition>,
    /// What the first input's source says: every event exactly timed (an emulate
    /// recording, ptscope's own PT decoder: see `WriterConfig`), the scope recorded.
    info: SourceInfo,
}

fn extras(
    exe: &Option<ExeInfo>,
    bias: &mut Option<u64>,
    totals: &mut Totals,
    quiet_if_unused: bool,
    info: SourceInfo,
) -> Extras {
    let Some(e) = exe else {
        return Extras {
            ocaml_exception_info: None,
            debug_info: Default::default(),
            info,
        };
    };
    let b = match *bias {
        Some(b) => b,
        None => {
            if !quiet_if_unused {
                totals.notes.push(Notice::ExecutableNeverEntered);
            }
            *bias = Some(0);
            0
        }
    };
    let (ocaml_exception_info, debug_info) = e.rebased(b);
    Extras {
        ocaml_exception_info,
        debug_info,
        info,
    }
}

/// How the decoding thread is set up for `opts`' inputs.
pub(crate) fn reading(opts: &DecodeOptions) -> Reading {
    // Transcripts stay comparable with magic-trace's: perf's names and stacks as printed.
    let naming = opts.format == Format::Fxt;
    Reading {
        perf: opts.perf.clone(),
        decoder: opts.decoder,
        no_inline: opts.no_inline,
        perf_inline: opts.perf_inline && !opts.no_inline,
        naming,
        scope: opts.scope,
    }
}

/// What the writer's side is handed, in order.
pub(crate) enum Step<'e> {
    /// An input was opened: what its source says about it (before its events).
    Opened(SourceInfo),
    /// The next event, read where the decoding thread put it (not moved: copying each
    /// 80-byte event out of its batch was most of the writer thread's cost of taking it).
    Event(&'e Event),
    /// An input ended (a snapshot boundary unless it was the last).
    InputDone,
}

/// How many events ahead of the one being written [`each_step`] prefetches.
const PREFETCH_AHEAD: usize = 4;

/// Asks the processor to bring `event`'s cache lines in (a hint: no effect on results).
#[inline(always)]
fn prefetch(event: &Event) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = (event as *const Event).cast::<i8>();
        // SAFETY: prefetching is a hint that never faults, and both addresses are
        // inside `event` (its first and last byte).
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.add(std::mem::size_of::<Event>() - 1));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = event;
}

/// How long perf is given to end after an interrupt asked it to, before it is killed.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs the decoding thread over `specs` and hands every event, and every input's end,
/// to `f` with the names so far (demangled for display with `demangle`). Returns the
/// names.
pub(crate) fn each_step(
    specs: Vec<InputSpec>,
    reading: Reading,
    demangle: bool,
    observer: &dyn Observer,
    totals: &mut Totals,
    mut f: impl FnMut(Step<'_>, &StringTable, &mut Totals),
) -> Result<StringTable, Error> {
    let (tx, rx) = std::sync::mpsc::sync_channel(8);
    let mut strings = StringTable::new();
    // When an interrupt asked perf to stop, if it was.
    let mut stopping: Option<std::time::Instant> = None;
    let mut killed = false;
    std::thread::scope(|threads| {
        let decoder = std::thread::Builder::new()
            .name("ptscope-decode".into())
            .spawn_scoped(threads, move || decode_inputs(specs, reading, observer, tx))
            .map_err(Error::Thread)?;
        loop {
            // Polled, so an interrupt stops the decode even while perf prints nothing (it
            // can think for seconds before its first line): perf is asked to stop and
            // write out what it decoded, the decoding thread sees its input end, and
            // what it had decoded still arrives and is written. A perf that does not
            // end within a moment (stuck in a read of its own) is killed.
            match stopping {
                None if observer.stopped() => {
                    stopping = Some(std::time::Instant::now());
                    ptscope_decode::perf::stop_all();
                }
                Some(t) if !killed && t.elapsed() >= STOP_GRACE => {
                    killed = true;
                    ptscope_decode::perf::kill_all();
                }
                _ => {}
            }
            let msg = match rx.recv_timeout(std::time::Duration::from_millis(50)) {
                Ok(m) => m,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            };
            match msg {
                Msg::Opened(info) => f(Step::Opened(info), &strings, totals),
                Msg::Batch { new, events } => {
                    intern_new(&mut strings, &new, demangle);
                    for (i, e) in events.iter().enumerate() {
                        // The decoding thread wrote these on the other core: ask for an
                        // event a few ahead now, so its cache lines are here when needed.
                        if let Some(next) = events.get(i + PREFETCH_AHEAD) {
                            prefetch(next);
                        }
                        if let Event::Ok { data, .. } = e {
                            match data {
                                ptscope_event::EventData::StackSample { .. } => totals.samples += 1,
                                ptscope_event::EventData::Trace { .. } => totals.branches += 1,
                                _ => {}
                            }
                        }
                        f(Step::Event(e), &strings, totals);
                    }
                }
                done => {
                    totals.add(done, observer);
                    f(Step::InputDone, &strings, totals);
                }
            }
        }
        if decoder.join().is_err() {
            totals
                .errors
                .push("the decoding thread failed; the trace holds what was decoded before".into());
        }
        Ok::<(), Error>(())
    })?;
    totals.interrupted = observer.stopped();
    Ok(strings)
}

/// Feeds every input through one writer, snapshot by snapshot.
#[allow(clippy::too_many_arguments)]
fn drive<S: TraceSink, W: StackWriter<S>, F: FnOnce(S, u64, Extras) -> W>(
    specs: Vec<InputSpec>,
    opts: &DecodeOptions,
    end_at: Option<u64>,
    hit_times: Vec<u64>,
    sink: S,
    make_writer: F,
    totals: &mut Totals,
    observer: &dyn Observer,
) -> Result<(S, StringTable), Error> {
    let exe = match &opts.executable {
        Some(p) => Some(ExeInfo::load(p)?),
        None => None,
    };
    // A PIE's addresses are known only once an event inside it reveals the load bias.
    let mut bias: Option<u64> = match &exe {
        Some(e) if e.pie => None,
        _ => Some(0),
    };
    let mut held: Vec<Event> = Vec::new();
    let marker = opts
        .recording_dir()
        .map(|d| d.join(ptscope_record::session::ROTATED_FILES_MARKER));
    let rotated = marker.as_ref().is_some_and(|m| m.exists());
    // A sampling recording with trigger hits: its files are pieces of one recording, and
    // each hit ends a snapshot, at the hit's time whatever file it falls in (hits closer
    // together than perf can start a new file are one snapshot each, as with emulate).
    // What comes after the last hit is after the moments asked for.
    let cuts: Vec<u64> = if rotated { hit_times } else { Vec::new() };
    let mut next_cut = 0;
    // With --multi-snapshot sampling the marker names the files that end a snapshot.
    let snapshot_ends: std::collections::HashSet<String> = marker
        .as_ref()
        .and_then(|m| std::fs::read_to_string(m).ok())
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    // Whether the input being read ends a snapshot (by its recording's name).
    let ends_snapshot = |info: &SourceInfo| {
        info.recording
            .as_deref()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .is_some_and(|n| snapshot_ends.contains(n))
    };
    let demangle = opts.demangle && opts.format == Format::Fxt;
    let mut range = opts.filter.as_ref().map(|(start, stop)| RangeFilter {
        start: start.clone(),
        stop: stop.clone(),
        inside: false,
        seen_start: false,
        seen_stop: false,
    });
    let inputs = specs.len();
    // What the inputs' sources say about themselves, as they are opened: the writer
    // starts with the first's; whether all were text, for a message.
    let mut first_info: Option<SourceInfo> = None;
    let mut all_text = true;
    let mut current_ends = false;
    // When nothing was decoded, whether the recording followed only given threads says
    // why perf could have names and no samples.
    let mut recordings: Vec<std::path::PathBuf> = Vec::new();
    let reading = reading(opts);
    // The writer starts at the trace's first time with what the executable adds, and
    // is given the events held back until then.
    let start = |(sink, make): (S, F),
                 first: u64,
                 held: &mut Vec<Event>,
                 bias: &mut Option<u64>,
                 totals: &mut Totals,
                 range: &mut Option<RangeFilter>,
                 strings: &StringTable,
                 info: SourceInfo| {
        let extras = extras(&exe, bias, totals, opts.executable_implied, info);
        let mut w = make(sink, first, extras);
        for e in held.drain(..) {
            feed(&mut w, range, &e, strings);
        }
        w
    };
    let mut writer: Option<W> = None;
    let mut pending = Some((sink, make_writer));
    let mut done = 0;
    let strings = each_step(
        specs,
        reading,
        demangle,
        observer,
        totals,
        |step, strings, totals| match step {
            Step::Opened(info) => {
                all_text &= info.text;
                recordings.extend(info.recording.clone());
                current_ends = ends_snapshot(&info);
                first_info.get_or_insert(info);
            }
            Step::Event(event) => {
                // A trigger's snapshot ends at the hit: samples perf took while ptscope
                // was still stopping the program are after the moment asked for.
                if end_at.is_some_and(|t| event.time().is_some_and(|et| et > t)) {
                    return;
                }
                if let Some(t) = event.time().filter(|&t| t > 0) {
                    while cuts.get(next_cut).is_some_and(|&cut| t > cut) {
                        next_cut += 1;
                        if next_cut < cuts.len() {
                            if let Some(w) = writer.as_mut() {
                                w.end_snapshot(strings);
                            }
                        }
                    }
                    if !cuts.is_empty() && next_cut == cuts.len() {
                        return;
                    }
                }
                if writer.is_none() {
                    if bias.is_none() {
                        bias = exe.as_ref().and_then(|e| e.bias_from(event, strings));
                    }
                    // Thread names (perf's are at time 0 for threads that existed
                    // before recording) must not decide where the trace starts.
                    if (bias.is_none() || event.is_sideband()) && held.len() < MAX_HELD {
                        held.push(event.clone());
                        return;
                    }
                    let Some(p) = pending.take() else {
                        return;
                    };
                    let first = first_time(&held, event);
                    let info = first_info.clone().unwrap_or_default();
                    let w = start(
                        p, first, &mut held, &mut bias, totals, &mut range, strings, info,
                    );
                    writer = Some(w);
                }
                if let Some(w) = writer.as_mut() {
                    feed(w, &mut range, event, strings);
                }
            }
            Step::InputDone => {
                done += 1;
                // Each perf.data file is one snapshot: close its frames before the next,
                // unless the files are the pieces of one rotated sampling recording (and
                // this one does not end one of its snapshots).
                if done < inputs && cuts.is_empty() && (!rotated || current_ends) {
                    if let Some(w) = writer.as_mut() {
                        w.end_snapshot(strings);
                    }
                }
            }
        },
    )?;
    // Names alone (a recording without samples) are not a trace: that stays an error.
    if writer.is_none() && held.iter().any(|e| !e.is_sideband()) {
        if let Some(p) = pending.take() {
            let first = first_time(&held, &held[0]);
            let info = first_info.clone().unwrap_or_default();
            writer = Some(start(
                p, first, &mut held, &mut bias, totals, &mut range, &strings, info,
            ));
        }
    }
    // A filter or trigger that never matched is no error, but must not pass unsaid.
    if let Some(note) = range.as_ref().and_then(|r| r.note(&strings)) {
        totals.notes.push(note);
    }
    if let Some(t) = &opts.missed_trigger {
        totals.notes.push(Notice::TriggerNeverHit {
            trigger: t.clone(),
            similar: crate::names::nearest_names(&strings, t, 5),
        });
    }
    match writer {
        Some(mut w) => {
            w.end_of_input();
            for &(pid, start) in &totals.entries {
                w.set_process_start(pid, start);
            }
            let sink = w.finish(&strings);
            Ok((sink, strings))
        }
        None => Err(Error::NoEvents(NoEvents {
            interrupted: totals.interrupted,
            names_only: !held.is_empty(),
            per_thread: recordings
                .iter()
                .any(|p| ptscope_decode::header::read_header(p).is_ok_and(|h| h.per_thread())),
            causes: totals
                .errors
                .iter()
                .cloned()
                .chain(totals.notes.iter().map(|n| n.to_string()))
                .collect(),
            skipped_lines: totals.warnings,
            lines: totals.lines,
            first_skipped: totals.kept.clone(),
            all_text,
            empty_input: totals.bytes == 0 && totals.lines == 0,
            nothing_failed: totals.errors.is_empty(),
        })),
    }
}

/// Runs the chosen stack writer over every input.
pub(crate) fn run_writer<S: TraceSink>(
    specs: Vec<InputSpec>,
    opts: &DecodeOptions,
    config: WriterConfig,
    sink: S,
    totals: &mut Totals,
    observer: &dyn Observer,
) -> Result<(S, StringTable), Error> {
    // One snapshot taken at a trigger hit ends at that hit (several are multi-snapshot).
    let mut hit_times: Vec<u64> = config
        .hits
        .iter()
        .map(|h| h.time)
        .filter(|&t| t > 0)
        .collect();
    hit_times.sort_unstable();
    let end_at = match (specs.len(), config.hits.as_slice()) {
        (1, [.., last]) if last.time > 0 => Some(last.time),
        _ => None,
    };
    // Both writers take the same options; what only the input knows is added per input:
    // the scope a recording asks for, unless the user said one.
    let scope_asked = opts.scope;
    let config_for = move |earliest_time, x: Extras| WriterConfig {
        earliest_time,
        ocaml_exception_info: config
            .ocaml_exception_info
            .clone()
            .or(x.ocaml_exception_info)
            .or(x.info.ocaml_exception_info.clone()),
        debug_info: x.debug_info,
        exact_times: x.info.exact_times,
        scope: scope_asked.or(x.info.scope).unwrap_or(config.scope),
        ..config.clone()
    };
    match opts.writer {
        WriterKind::Legacy => drive(
            specs,
            opts,
            end_at,
            hit_times,
            sink,
            |sink, earliest_time, x: Extras| LegacyWriter::new(sink, config_for(earliest_time, x)),
            totals,
            observer,
        ),
        WriterKind::Segments => drive(
            specs,
            opts,
            end_at,
            hit_times,
            sink,
            |sink, earliest_time, x: Extras| {
                SegmentsWriter::new(sink, config_for(earliest_time, x))
            },
            totals,
            observer,
        ),
    }
}

/// Writes `markers` as instants on a track of their own ("ptscope" / "trace info"), where
/// a Perfetto user sees them beside the threads: what clock an emulate trace's times
/// follow, and where a thread exec'd out of the trace.
pub(crate) fn info_track<S: TraceSink>(sink: &mut S, markers: &[(u64, String)]) {
    if markers.is_empty() {
        return;
    }
    let pid = sink.allocate_pid("ptscope");
    let track = sink.allocate_thread(pid, "trace info");
    for (time, text) in markers {
        sink.duration_instant(track, text, i64::try_from(*time).unwrap_or(i64::MAX), &[]);
    }
}
