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
use ptscope_stacks::transcript::TranscriptSink;
use ptscope_stacks::TraceSink;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

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
    let decodings: Vec<Decoding<'_, '_>> = (0..snapshots)
        .map(|i| Decoding::new(&view, i, clock, &comm))
        .collect();
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

/// Walks one thread into `stack` on `sink`; `cut` is offered the sink after each batch
/// (to hand over what it holds); stops early when the user interrupts.
#[allow(clippy::too_many_arguments)]
fn walk_thread<S: TraceSink>(
    d: &Decoding<'_, '_>,
    i: usize,
    sink: &mut S,
    track: S::Thread,
    observer: &dyn Observer,
    progress: &AtomicU64,
    mut cut: impl FnMut(&mut S),
) -> ThreadResult {
    let mut walker = d.walker(i);
    let mut stack = ExactStack::new();
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
        cut(sink);
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
        in_turn(TranscriptSink::default(), decodings, observer, totals)
    } else {
        let s = in_turn(
            FilterSink::new(TranscriptSink::default(), f),
            decodings,
            observer,
            totals,
        );
        totals.filtered(&f, s.stats());
        s.into_inner()
    };
    write_text(&opts.output, &sink.render())
}

/// Every thread of every snapshot into `sink`, one after the other.
fn in_turn<S: TraceSink>(
    mut sink: S,
    decodings: &[Decoding<'_, '_>],
    observer: &dyn Observer,
    totals: &mut Totals,
) -> S {
    let mut tracks = Tracks::default();
    let progress = AtomicU64::new(0);
    'all: for d in decodings {
        for (i, t) in d.threads().iter().enumerate() {
            let track = tracks.track(&mut sink, d.threads(), t);
            let r = walk_thread(d, i, &mut sink, track, observer, &progress, |_| {});
            account(r, t, observer, totals);
            if observer.stopped() {
                break 'all;
            }
        }
    }
    sink.end_of_input();
    sink
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

/// Walks thread `i` into `sink` (a fragment, or a filter in front of one: `frag` finds
/// it), handing the fragment's bytes to `tx` whenever about a megabyte is ready.
#[allow(clippy::too_many_arguments)]
fn fragments<S: TraceSink>(
    d: &Decoding<'_, '_>,
    i: usize,
    sink: &mut S,
    track: S::Thread,
    frag: impl Fn(&mut S) -> &mut Fragment,
    observer: &dyn Observer,
    progress: &AtomicU64,
    tx: &std::sync::mpsc::SyncSender<Vec<u8>>,
) -> ThreadResult {
    let send = |f: &mut Fragment| {
        f.cut();
        let bytes = std::mem::take(f.writer_mut().inner_mut());
        if !bytes.is_empty() {
            let _ = tx.send(bytes);
        }
    };
    let r = walk_thread(d, i, sink, track, observer, progress, |s| {
        let f = frag(s);
        if f.writer_mut().buffered() + f.writer_mut().inner_mut().len() >= FRAGMENT {
            send(f);
        }
    });
    send(frag(sink));
    r
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
                        let (pk, tk) = koids.get(&(t.pid, t.tid)).copied().unwrap_or((0, 0));
                        let mut frag: Fragment = FxtSink::fragment(Vec::new(), no_warning);
                        let track: FxtThread = frag.attach_thread(pk, tk);
                        let (r, stats) = if filter.is_none() {
                            let r =
                                fragments(d, i, &mut frag, track, |s| s, observer, progress, &tx);
                            (r, None)
                        } else {
                            let mut sink = FilterSink::new(frag, filter);
                            let r = fragments(
                                d,
                                i,
                                &mut sink,
                                track,
                                FilterSink::inner_mut,
                                observer,
                                progress,
                                &tx,
                            );
                            (r, Some(sink.stats()))
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
                filtered.kept += st.kept;
                filtered.hidden_calls += st.hidden_calls;
                filtered.too_deep += st.too_deep;
                filtered.outside += st.outside;
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
