//! Emulate recordings to a trace: block log → exact steps → stacks → output, one pass
//! per thread, without an event per branch and without holding the trace.
//!
//! Threads are independent, so each is decoded on its own worker (as many as there are
//! cores). Into FXT, each worker writes its thread's slices as self-contained fragments
//! ([`ptscope_fxt::FxtWriter::cut`]) of about a megabyte, handed to the output as they
//! fill (gzip runs on a thread of its own): memory stays a few fragments per worker and
//! each thread's stack, whatever the recording's length. Into a transcript, threads are
//! written one after the other.

use crate::drive::Totals;
use crate::inputs::InputSpec;
use crate::{DecodeOptions, Error, Format, Observer};
use ptscope_emulate::{ClockKind, Decoding, Recording, ThreadInfo};
use ptscope_event::exact::ExactStep;
use ptscope_output::filter::{FilterSink, FilterStats};
use ptscope_output::{FxtSink, FxtThread};
use ptscope_stacks::exact::ExactStack;
use ptscope_stacks::ordered::OrderedSink;
use ptscope_stacks::transcript::TranscriptSink;
use ptscope_stacks::{Arg, Name, TraceSink};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

mod callers_first;
use callers_first::{CallersFirst, Held};

/// Bytes of FXT a worker gathers before handing them to the output.
const FRAGMENT: usize = 1 << 20;

/// The emulate recording `specs` name, if they all are one.
pub(crate) fn emulated(specs: &[InputSpec]) -> Option<(PathBuf, String, ClockKind)> {
    let mut it = specs.iter();
    let first = match it.next()? {
        InputSpec::Emulate(d, c, _, k) => (d.clone(), c.clone(), *k),
        _ => return None,
    };
    it.all(|s| matches!(s, InputSpec::Emulate(d, ..) if *d == first.0))
        .then_some(first)
}

/// What one thread's decode gave.
#[derive(Default)]
struct ThreadResult {
    steps: u64,
    problem: Option<String>,
    exec: Option<ptscope_emulate::ExecNotice>,
}

/// Decodes an emulate recording into `opts.output`.
pub(crate) fn decode(
    opts: &DecodeOptions,
    input: (PathBuf, String, ClockKind),
    observer: &dyn Observer,
    totals: &mut Totals,
) -> Result<(), Error> {
    let (dir, comm, clock) = input;
    let rec = Recording::open(&dir).map_err(Error::Emulate)?;
    let view = rec.view().map_err(Error::Emulate)?;
    totals.errors.extend(view.notices.iter().cloned());
    let snapshots = view.snapshots().len();
    let mut decodings: Vec<Decoding<'_, '_>> = (0..snapshots)
        .map(|i| Decoding::new(&view, i, clock, &comm))
        .collect();
    // Snapshots follow each other on one time line.
    if let Some(origin) = decodings.iter().map(Decoding::origin).min() {
        for d in &mut decodings {
            d.set_origin(origin);
        }
    }
    let total: u64 = view.procs.iter().map(|p| p.index.exec_bytes()).sum();
    observer.started(&dir.display().to_string(), Some(total));
    if let Some(d) = decodings.first() {
        observer.info(&d.clock_info());
        totals.markers.push((0, d.clock_marker()));
    }
    let result = match opts.format {
        Format::Transcript => transcript(opts, &decodings, observer, totals),
        Format::Fxt => fxt(opts, &decodings, observer, totals),
    };
    // A stop cuts the walks short: the trace is partial, and its recording must be kept.
    totals.interrupted = observer.stopped();
    observer.finished();
    result
}

/// Says what a thread's decode found and counts it.
fn account(r: ThreadResult, t: &ThreadInfo, observer: &dyn Observer, totals: &mut Totals) {
    totals.events += r.steps;
    if let Some(p) = r.problem {
        totals.errors.push(format!(
            "thread {} of process {}: {p}; the trace keeps what came before",
            t.tid, t.pid
        ));
    }
    if let Some(x) = r.exec {
        let what = if x.path.is_empty() {
            "another program".to_string()
        } else {
            x.path.clone()
        };
        observer.info(&format!(
            "thread {} exec'd {what} at {:.6} s: qemu-user runs the new program natively, so \
             nothing after the exec is traced",
            x.tid,
            x.time as f64 / 1e9
        ));
        totals.markers.push((
            x.time,
            format!(
                "exec: thread {} ran {what}; qemu-user runs it natively, nothing after this is \
                 traced",
                x.tid
            ),
        ));
    }
}

/// Walks thread `i` into `sink` (on a track of its own); stops early when the user
/// interrupts. `annotate`: mark inferred starts in slice names (transcripts).
fn walk_thread<S: TraceSink>(
    d: &Decoding<'_, '_>,
    i: usize,
    sink: &mut S,
    track: S::Thread,
    annotate: bool,
    observer: &dyn Observer,
    progress: &AtomicU64,
) -> ThreadResult {
    let mut walker = d.walker(i);
    let mut stack = if d.threads()[i].mid_run {
        ExactStack::mid_run(annotate)
    } else {
        ExactStack::new()
    };
    let mut buf: Vec<ExactStep> = Vec::with_capacity(8192);
    let mut result = ThreadResult::default();
    let mut seen = 0;
    while walker.fill(&mut buf) {
        let funcs = walker.functions();
        for s in &buf {
            stack.step(sink, track, s, funcs);
        }
        result.steps += buf.len() as u64;
        buf.clear();
        let pos = walker.position();
        observer.advanced(progress.fetch_add(pos - seen, Ordering::Relaxed) + pos - seen);
        seen = pos;
        if observer.stopped() {
            break;
        }
    }
    let end = stack.last_time();
    stack.close(sink, track, end, walker.functions());
    result.problem = walker.problem.take();
    result.exec = d.exec_notice(i, &walker);
    result
}

/// Threads one after the other, into a transcript.
fn transcript(
    opts: &DecodeOptions,
    decodings: &[Decoding<'_, '_>],
    observer: &dyn Observer,
    totals: &mut Totals,
) -> Result<(), Error> {
    let f = opts.output_filter;
    let sink = if f.is_none() {
        in_turn(TranscriptSink::default(), decodings, observer, totals)?
    } else {
        let s = in_turn(
            FilterSink::new(TranscriptSink::default(), f),
            decodings,
            observer,
            totals,
        )?;
        totals.filtered(&f, s.stats());
        s.into_inner()
    };
    write_text(&opts.output, &sink.render())
}

/// Every thread of every snapshot into `sink`, one after the other. Frames learnt late
/// (mid-run streams) are put in order snapshot by snapshot, so one snapshot's end and
/// the next one's start never mix, even at the same instant.
fn in_turn<S: TraceSink>(
    mut sink: S,
    decodings: &[Decoding<'_, '_>],
    observer: &dyn Observer,
    totals: &mut Totals,
) -> Result<S, Error> {
    let progress = AtomicU64::new(0);
    for d in decodings {
        let mut ordered = OrderedSink::new(sink);
        let mut tracks = Tracks::default();
        for (i, t) in d.threads().iter().enumerate() {
            let track = tracks.track(&mut ordered, d.threads(), t);
            let r = walk_thread(d, i, &mut ordered, track, true, observer, &progress);
            account(r, t, observer, totals);
            if observer.stopped() {
                break;
            }
        }
        sink = ordered.finish().map_err(Error::Reorder)?;
        if observer.stopped() {
            break;
        }
    }
    sink.end_of_input();
    Ok(sink)
}

fn write_text(output: &Path, text: &str) -> Result<(), Error> {
    if output == Path::new("-") {
        return std::io::stdout()
            .lock()
            .write_all(text.as_bytes())
            .map_err(Error::Stdout);
    }
    let mut out =
        ptscope_output::open_trace_output(output).map_err(|source| Error::CreateOutput {
            path: output.to_path_buf(),
            source,
        })?;
    out.write_all(text.as_bytes())
        .and_then(|()| out.finish())
        .map_err(|source| Error::WriteOutput {
            path: output.to_path_buf(),
            source,
        })
}

/// Every thread's track, in its process's group, named as the other writers name them
/// (`NAME [pid=P]`, `NAME [tid=T]`).
struct Tracks<T> {
    groups: HashMap<u32, u32>,
    threads: HashMap<(u32, u32), T>,
}

impl<T> Default for Tracks<T> {
    fn default() -> Self {
        Tracks {
            groups: HashMap::new(),
            threads: HashMap::new(),
        }
    }
}

impl<T: Copy> Tracks<T> {
    /// Thread `t`'s track (made the first time), its group named after the process's
    /// main thread among `all`.
    fn track<S: TraceSink<Thread = T>>(
        &mut self,
        sink: &mut S,
        all: &[ThreadInfo],
        t: &ThreadInfo,
    ) -> T {
        if let Some(&k) = self.threads.get(&(t.pid, t.tid)) {
            return k;
        }
        let group = *self.groups.entry(t.pid).or_insert_with(|| {
            let main = all
                .iter()
                .find(|x| x.pid == t.pid && x.tid == t.pid)
                .map_or(t.name.as_str(), |x| x.name.as_str());
            sink.allocate_pid(&format!("{main} [pid={}]", t.pid))
        });
        let track = sink.allocate_thread(group, &format!("{} [tid={}]", t.name, t.tid));
        self.threads.insert((t.pid, t.tid), track);
        track
    }
}

/// One thread's FXT fragment: its slices written as self-contained fragments, each
/// handed to the output thread once about a megabyte is ready (and the rest when
/// dropped). Its track is the one the header named (`koids`).
struct Sending<'t> {
    frag: Fragment,
    tx: &'t std::sync::mpsc::SyncSender<Vec<u8>>,
    koids: (u32, u32),
    /// Where finished fragments wait instead ([`CallersFirst`]).
    hold: Option<Held>,
}

impl Sending<'_> {
    /// Hands what is written over.
    fn send(&mut self) {
        self.frag.cut();
        if self.frag.writer_mut().inner_mut().is_empty() {
            return;
        }
        // The next fragment's room at once: grown from nothing, each fragment was
        // copied again at every doubling (~1 % of a decode).
        let room = Vec::with_capacity(FRAGMENT + FRAGMENT / 8);
        let bytes = std::mem::replace(self.frag.writer_mut().inner_mut(), room);
        match &mut self.hold {
            Some(h) => h.push(bytes),
            None => {
                let _ = self.tx.send(bytes);
            }
        }
    }

    fn maybe_send(&mut self) {
        let w = self.frag.writer_mut();
        if w.buffered() + w.inner_mut().len() >= FRAGMENT {
            self.send();
        }
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        self.send();
    }
}

impl TraceSink for Sending<'_> {
    type Thread = FxtThread;

    fn allocate_pid(&mut self, _name: &str) -> u32 {
        self.koids.0
    }
    fn allocate_thread(&mut self, _pid: u32, _name: &str) -> FxtThread {
        self.frag.attach_thread(self.koids.0, self.koids.1)
    }
    fn duration_begin(&mut self, t: FxtThread, name: &str, time: i64, args: &[Arg<'_>]) {
        self.frag.duration_begin(t, name, time, args);
        self.maybe_send();
    }
    fn duration_begin_name(&mut self, t: FxtThread, name: Name<'_>, time: i64, args: &[Arg<'_>]) {
        self.frag.duration_begin_name(t, name, time, args);
        self.maybe_send();
    }
    fn duration_end(&mut self, t: FxtThread, name: &str, time: i64, args: &[Arg<'_>]) {
        self.frag.duration_end(t, name, time, args);
        self.maybe_send();
    }
    fn duration_complete(&mut self, t: FxtThread, name: &str, a: i64, b: i64, args: &[Arg<'_>]) {
        self.frag.duration_complete(t, name, a, b, args);
        self.maybe_send();
    }
    fn duration_instant(&mut self, t: FxtThread, name: &str, time: i64, args: &[Arg<'_>]) {
        self.frag.duration_instant(t, name, time, args);
    }
    fn counter(&mut self, t: FxtThread, name: &str, time: i64, args: &[Arg<'_>]) {
        self.frag.counter(t, name, time, args);
    }
    fn warning(&mut self, message: &str) {
        self.frag.warning(message);
    }
}

/// Walks thread `i` into `sink`, on the track `sink` gives it.
fn write_one<S: TraceSink>(
    d: &Decoding<'_, '_>,
    i: usize,
    sink: &mut S,
    observer: &dyn Observer,
    progress: &AtomicU64,
) -> ThreadResult {
    let track = sink.allocate_thread(0, "");
    walk_thread(d, i, sink, track, false, observer, progress)
}

/// A fragment writer's sink: FXT into a buffer handed over when full.
type Fragment = FxtSink<Vec<u8>, fn(&str)>;

fn no_warning(_: &str) {}

/// Threads on parallel workers, into FXT fragments.
fn fxt(
    opts: &DecodeOptions,
    decodings: &[Decoding<'_, '_>],
    observer: &dyn Observer,
    totals: &mut Totals,
) -> Result<(), Error> {
    let output = &opts.output;
    let mut out =
        ptscope_output::open_trace_output(output).map_err(|source| Error::CreateOutput {
            path: output.clone(),
            source,
        })?;
    // The header, and every process's and thread's track, named once.
    let mut head: Fragment = FxtSink::with_warnings(Vec::new(), no_warning);
    let mut tracks = Tracks::default();
    let mut koids: HashMap<(u32, u32), (u32, u32)> = HashMap::new();
    for d in decodings {
        for t in d.threads() {
            let track = tracks.track(&mut head, d.threads(), t);
            let k = head.thread_koids(track).unwrap_or((0, 0));
            koids.insert((t.pid, t.tid), k);
        }
    }
    let info_group = head.allocate_pid("ptscope");
    let info_track = head.allocate_thread(info_group, "trace info");
    let info_koids = head.thread_koids(info_track).unwrap_or((info_group, 0));
    let bytes = head.finish().map_err(|source| Error::WriteOutput {
        path: output.clone(),
        source,
    })?;
    out.write_all(&bytes).map_err(|source| Error::WriteOutput {
        path: output.clone(),
        source,
    })?;
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let progress = AtomicU64::new(0);
    let mut write_error = None;
    let mut filtered = FilterStats::default();
    for d in decodings {
        let threads = d.threads();
        // Largest first, so a long thread does not start last.
        let mut order: Vec<usize> = (0..threads.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(d.thread_bytes(i)));
        let next = AtomicUsize::new(0);
        let results: Mutex<Vec<(usize, ThreadResult, Option<FilterStats>)>> =
            Mutex::new(Vec::new());
        let filter = opts.output_filter;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(2 * workers);
        std::thread::scope(|scope| {
            for _ in 0..workers.min(threads.len()) {
                let tx = tx.clone();
                let (next, order, results, koids, progress) =
                    (&next, &order, &results, &koids, &progress);
                scope.spawn(move || {
                    while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let t = &threads[i];
                        let koids = koids.get(&(t.pid, t.tid)).copied().unwrap_or((0, 0));
                        let frag: Fragment = FxtSink::fragment(Vec::new(), no_warning);
                        let sending = Sending {
                            frag,
                            tx: &tx,
                            koids,
                            hold: None,
                        };
                        let reorder_failed = |e: std::io::Error| {
                            observer.warning(&format!("cannot reorder thread {}: {e}", t.tid));
                        };
                        let (r, stats) = match (t.mid_run, filter.is_none()) {
                            (false, true) => {
                                let mut s = sending;
                                (write_one(d, i, &mut s, observer, progress), None)
                            }
                            (false, false) => {
                                let mut s = FilterSink::new(sending, filter);
                                let r = write_one(d, i, &mut s, observer, progress);
                                (r, Some(s.stats()))
                            }
                            // Callers learnt late go first; the rest waits for them (in an
                            // unnamed temporary file past 16 MiB).
                            (true, true) => {
                                let mut s = CallersFirst::new(sending, callers_first::MEMORY_LIMIT);
                                let r = write_one(d, i, &mut s, observer, progress);
                                if let Some(e) = s.finish() {
                                    observer.warning(&format!("thread {}: {e}", t.tid));
                                }
                                (r, None)
                            }
                            (true, false) => {
                                let mut s = OrderedSink::new(FilterSink::new(sending, filter));
                                let r = write_one(d, i, &mut s, observer, progress);
                                let st = s.finish().map(|f| f.stats()).map_err(reorder_failed);
                                (r, st.ok())
                            }
                        };
                        if let Ok(mut res) = results.lock() {
                            res.push((i, r, stats));
                        }
                    }
                });
            }
            drop(tx);
            for fragment in rx {
                if write_error.is_none() {
                    if let Err(e) = out.write_all(&fragment) {
                        write_error = Some(e);
                    }
                }
            }
        });
        let mut res = results.into_inner().unwrap_or_default();
        res.sort_by_key(|r| r.0);
        for (i, r, st) in res {
            account(r, &threads[i], observer, totals);
            if let Some(st) = st {
                filtered += st;
            }
        }
        if observer.stopped() {
            break;
        }
    }
    if !opts.output_filter.is_none() {
        totals.filtered(&opts.output_filter, filtered);
    }
    if let Some(source) = write_error {
        return Err(Error::WriteOutput {
            path: output.clone(),
            source,
        });
    }
    // The trace's own track: its clock, and where threads exec'd.
    let mut info: Fragment = FxtSink::fragment(Vec::new(), no_warning);
    let track = info.attach_thread(info_koids.0, info_koids.1);
    totals.markers.sort_by_key(|m| m.0);
    for (time, text) in &totals.markers {
        info.duration_instant(track, text, i64::try_from(*time).unwrap_or(i64::MAX), &[]);
    }
    let bytes = info.finish().map_err(|source| Error::WriteOutput {
        path: output.clone(),
        source,
    })?;
    out.write_all(&bytes)
        .and_then(|()| out.finish())
        .map_err(|source| Error::FinishOutput {
            path: output.clone(),
            source,
        })
}
