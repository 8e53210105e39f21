//! The builtin decoder as an [`EventSource`]: each queue's trace is cut at its PSBs
//! into chunks that worker threads decode ahead (one block cache each), a few chunks
//! per queue at a time so memory stays bounded by the chunks in flight, not by the
//! trace; the queues' events and the side band are merged by time and named as perf
//! names them.

use crate::image::QueueMemory;
use crate::names::Namer;
use crate::recording::{Recording, Task, TaskAt};
use crate::Options;
use ptscope_event::source::{EventSource, Finished, SourceError, Stats, Warning};
use ptscope_event::{Event, EventData, Kind, StringTable, Thread, TraceStateChange};
use ptscope_intel_pt::cache::BlockCache;
use ptscope_intel_pt::decoder::{BranchKind, Config, Event as PtEvent, EventKind, StopReason};
use ptscope_intel_pt::insn::FactOptions;
use ptscope_perf_data::PerfData;
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Range;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};

/// The bytes of one stream: a range of the file, or pieces joined.
enum StreamBytes {
    File(Range<usize>),
    Joined(Vec<u8>),
}

/// What the workers share with the source.
pub(crate) struct Shared {
    pub(crate) data: PerfData,
    pub(crate) rec: Recording,
    /// `[queue][stream]`.
    streams: Vec<Vec<StreamBytes>>,
    cfg: Config,
    facts: FactOptions,
}

impl Shared {
    fn stream(&self, q: usize, s: usize) -> &[u8] {
        match &self.streams[q][s] {
            StreamBytes::File(r) => self.data.bytes().get(r.clone()).unwrap_or_default(),
            StreamBytes::Joined(v) => v,
        }
    }
}

/// One chunk to decode.
struct Job {
    id: usize,
    queue: usize,
    stream: usize,
    range: Range<usize>,
}

/// Decoded chunks by job id, and the workers waiting.
type Results = Arc<(Mutex<FxHashMap<usize, Vec<PtEvent>>>, Condvar)>;

/// Merged chunks' vectors, emptied, for the workers to fill again: a fresh vector per
/// chunk grew by doubling (copies) into newly mapped memory (page faults), twice as
/// many with two workers.
type Spare = Arc<Mutex<Vec<Vec<PtEvent>>>>;

/// At most this many spare vectors are kept (one per chunk in flight is enough).
const MAX_SPARE: usize = 16;

/// The worker threads.
struct Pool {
    jobs: Option<mpsc::Sender<Job>>,
    /// Set when the source ends early: workers drop the jobs left.
    stopping: Arc<std::sync::atomic::AtomicBool>,
    results: Results,
    spare: Spare,
    threads: Vec<std::thread::JoinHandle<()>>,
    next_id: usize,
}

impl Pool {
    fn new(shared: &Arc<Shared>, threads: usize) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let results: Results = Arc::new((Mutex::new(FxHashMap::default()), Condvar::new()));
        let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spare: Spare = Arc::default();
        let mut handles = Vec::new();
        for i in 0..threads.max(1) {
            let rx = Arc::clone(&rx);
            let shared = Arc::clone(shared);
            let results = Arc::clone(&results);
            let stopping = Arc::clone(&stopping);
            let spare = Arc::clone(&spare);
            handles.push(
                std::thread::Builder::new()
                    .name(format!("ptscope-pt-{i}"))
                    .spawn(move || worker(&shared, &rx, &results, &spare, &stopping))?,
            );
        }
        Ok(Pool {
            jobs: Some(tx),
            stopping,
            results,
            spare,
            threads: handles,
            next_id: 0,
        })
    }

    fn submit(&mut self, queue: usize, stream: usize, range: Range<usize>) -> usize {
        let id = self.next_id;
        self.next_id += 1;
        if let Some(tx) = &self.jobs {
            let _ = tx.send(Job {
                id,
                queue,
                stream,
                range,
            });
        }
        id
    }

    /// Waits for job `id`'s events.
    fn take(&self, id: usize) -> Vec<PtEvent> {
        let (lock, cv) = &*self.results;
        let mut map = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(v) = map.remove(&id) {
                return v;
            }
            if self.threads.iter().all(|t| t.is_finished()) {
                return Vec::new();
            }
            map = cv
                .wait_timeout(map, std::time::Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn stop(&mut self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.jobs = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A worker: decodes the chunks it is given with its own block cache.
fn worker(
    shared: &Shared,
    rx: &Mutex<mpsc::Receiver<Job>>,
    results: &Results,
    spare: &Mutex<Vec<Vec<PtEvent>>>,
    stopping: &std::sync::atomic::AtomicBool,
) {
    let mut cache = BlockCache::new(shared.facts);
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
            rx.recv()
        };
        let Ok(job) = job else { return };
        if stopping.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let q = &shared.rec.queues[job.queue];
        let mem = QueueMemory {
            space: &shared.rec.space,
            timeline: &q.timeline,
        };
        let bytes = shared.stream(job.queue, job.stream);
        let reference = q.streams[job.stream]
            .pieces
            .first()
            .map_or(0, |p| p.reference);
        let mut out = spare
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default();
        out.clear();
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ptscope_intel_pt::decode_chunk(
                bytes,
                job.range.clone(),
                shared.cfg,
                &mem,
                &mut cache,
                reference,
                &mut out,
            );
        }));
        if decoded.is_err() {
            // A bug in the decoder: this chunk is lost, said as a decode error.
            out.clear();
            out.push(PtEvent {
                time: 0,
                kind: EventKind::Error {
                    error: ptscope_intel_pt::decoder::DecodeError::Mismatch,
                    offset: job.range.start as u64,
                    ip: 0,
                },
            });
            cache = BlockCache::new(shared.facts);
        }
        // Perf time, here rather than in the merge: the consuming thread bounds the
        // wall time when workers run on every core.
        let time = &shared.rec.time;
        for e in &mut out {
            e.time = time.tsc_to_ns(e.time);
        }
        let (lock, cv) = &**results;
        lock.lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(job.id, out);
        cv.notify_all();
    }
}

/// One queue being merged.
struct QueueState {
    /// `(stream, range)` of every chunk, in order.
    chunks: Vec<(usize, Range<usize>)>,
    /// Jobs submitted for the next chunks, in order.
    submitted: std::collections::VecDeque<usize>,
    next_submit: usize,
    /// The chunk being merged: its events, timed in perf time (the workers convert).
    current: Vec<PtEvent>,
    pos: usize,
    ctx: u32,
    /// `ctx`'s thread and image, looked up when it changes, not at every event.
    thread: Thread,
    image: u32,
    in_tx: bool,
    cbr: Option<u8>,
    /// Chunks whose stream starts after lost data.
    lost_at: Vec<usize>,
    taken: usize,
}

/// The builtin decoder's source (see the module documentation).
pub struct PtSource {
    shared: Arc<Shared>,
    strings: StringTable,
    namer: Namer,
    queues: Vec<QueueState>,
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    /// The queue whose next event comes before every other queue's (its perf time and
    /// index), kept out of the heap: a queue runs for many events before another's
    /// comes first (there is often only one), and each would otherwise be a heap push
    /// and pop.
    hot: Option<(u64, usize)>,
    tasks: std::vec::IntoIter<TaskAt>,
    next_task: Option<TaskAt>,
    pool: Pool,
    window: usize,
    stats: Stats,
    size: u64,
    started: bool,
    /// Messages about the recording (files refused, lost data).
    notices: Vec<String>,
    incomplete: Vec<String>,
    errors: u64,
    /// The OCaml programs' exception handlers, from their instructions.
    ocaml: Option<ptscope_event::OcamlExceptionInfo>,
    /// [`EventSource::next_event`]'s one event (the merge appends to a vector).
    one: Vec<Event>,
}

impl PtSource {
    pub(crate) fn new(
        data: PerfData,
        rec: Recording,
        opts: &Options,
    ) -> Result<Self, crate::Error> {
        let mut cfg = rec.config();
        cfg.skip_bad_bytes = true;
        let facts = FactOptions {
            ocaml_traps: opts.ocaml_traps,
        };
        let mut streams = Vec::new();
        let mut chunk_lists = Vec::new();
        let mut size = 0u64;
        for q in &rec.queues {
            let mut qs = Vec::new();
            for s in &q.streams {
                if s.pieces.len() == 1 {
                    qs.push(StreamBytes::File(s.pieces[0].range.clone()));
                } else {
                    let mut v = Vec::new();
                    for p in &s.pieces {
                        v.extend_from_slice(data.bytes().get(p.range.clone()).unwrap_or_default());
                    }
                    qs.push(StreamBytes::Joined(v));
                }
            }
            streams.push(qs);
        }
        let mut incomplete = Vec::new();
        let mut notices = Vec::new();
        if let Some(c) = &rec.corrupt {
            incomplete.push(format!("{c}: the side band after it is missing"));
        }
        if rec.aux_lost > 0 {
            notices.push(format!(
                "the trace lost data {} times while recording (the AUX buffer was full): \
                 decoding resumes at the next PSB after each loss",
                rec.aux_lost
            ));
        }
        for f in &rec.space.files {
            match &f.refused {
                Some(crate::image::Refused::BuildIdMismatch { recorded, found }) => {
                    notices.push(format!(
                    "{}: its build id ({}) is not the recording's ({recorded}): the file changed \
                     since it was traced, so its code is not decoded (perf's build-id cache has no \
                     copy either; record again, or put the traced build back)",
                    f.path,
                    if found.is_empty() { "none" } else { found }
                ))
                }
                Some(crate::image::Refused::Missing(why))
                    if f.path.starts_with('/') || &*f.path == "[vdso]" =>
                {
                    notices.push(format!(
                        "{}: its code cannot be read ({why}), so it is not decoded",
                        f.path
                    ))
                }
                _ => {}
            }
        }
        let ocaml = rec.space.ocaml_exception_info();
        let shared = Arc::new(Shared {
            data,
            rec,
            streams,
            cfg,
            facts,
        });
        let mut queues = Vec::new();
        for (qi, q) in shared.rec.queues.iter().enumerate() {
            let mut chunks = Vec::new();
            let mut lost_at = Vec::new();
            for (si, s) in q.streams.iter().enumerate() {
                let bytes = shared.stream(qi, si);
                size += bytes.len() as u64;
                if s.lost_before {
                    lost_at.push(chunks.len());
                }
                for r in ptscope_intel_pt::chunks(bytes, opts.chunk_size) {
                    chunks.push((si, r));
                }
            }
            chunk_lists.push(chunks.len());
            queues.push(QueueState {
                chunks,
                submitted: std::collections::VecDeque::new(),
                next_submit: 0,
                current: Vec::new(),
                pos: 0,
                ctx: u32::MAX,
                thread: Thread::default(),
                image: u32::MAX,
                in_tx: false,
                cbr: None,
                lost_at,
                taken: 0,
            });
        }
        let threads = opts
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let total: usize = chunk_lists.iter().sum();
        let pool = Pool::new(&shared, threads.min(total.max(1))).map_err(crate::Error::Thread)?;
        let active = queues
            .iter()
            .filter(|q| !q.chunks.is_empty())
            .count()
            .max(1);
        let window = (2 * threads / active).max(1) + 1;
        let tasks: Vec<TaskAt> = shared.rec.tasks.clone();
        Ok(PtSource {
            shared,
            strings: StringTable::new(),
            namer: Namer::new(),
            queues,
            heap: BinaryHeap::new(),
            hot: None,
            tasks: tasks.into_iter(),
            next_task: None,
            pool,
            window,
            stats: Stats::default(),
            size,
            started: false,
            notices,
            incomplete,
            errors: 0,
            ocaml,
            one: Vec::with_capacity(1),
        })
    }

    /// Keeps `window` chunks of queue `q` submitted ahead.
    fn fill(&mut self, q: usize) {
        let qs = &mut self.queues[q];
        while qs.submitted.len() < self.window && qs.next_submit < qs.chunks.len() {
            let (s, r) = qs.chunks[qs.next_submit].clone();
            qs.next_submit += 1;
            let id = self.pool.submit(q, s, r);
            qs.submitted.push_back(id);
        }
    }

    /// Loads queue `q`'s next chunk with events; false when it has none left.
    #[inline(never)]
    fn load(&mut self, q: usize) -> bool {
        loop {
            let Some(id) = self.queues[q].submitted.pop_front() else {
                return false;
            };
            self.fill(q);
            let events = self.pool.take(id);
            let qs = &mut self.queues[q];
            let index = qs.taken;
            qs.taken += 1;
            if let Some((s, r)) = qs.chunks.get(index) {
                self.stats.bytes += (r.end - r.start) as u64;
                let _ = s;
            }
            let done = std::mem::replace(&mut qs.current, events);
            qs.pos = 0;
            if done.capacity() > 0 {
                let mut spare = self.pool.spare.lock().unwrap_or_else(|e| e.into_inner());
                if spare.len() < MAX_SPARE {
                    spare.push(done);
                }
            }
            if qs.lost_at.contains(&index) {
                // Data was lost before this stream: said where it resumes.
                let t = qs.current.first().map_or(0, |e| e.time);
                qs.current.insert(
                    0,
                    PtEvent {
                        time: t,
                        kind: EventKind::Error {
                            error: ptscope_intel_pt::decoder::DecodeError::Truncated,
                            offset: 0,
                            ip: 0,
                        },
                    },
                );
            }
            if !qs.current.is_empty() {
                return true;
            }
        }
    }

    /// Puts queue `q`'s next event on the heap (loading chunks as needed). Inlined
    /// into the merge: it runs once per event.
    #[inline(always)]
    fn schedule(&mut self, q: usize) {
        let qs = &self.queues[q];
        let t = match qs.current.get(qs.pos) {
            Some(e) => e.time,
            None => {
                if !self.load(q) {
                    return;
                }
                // `load` leaves a chunk with events, from its first.
                let qs = &self.queues[q];
                qs.current.first().map_or(0, |e| e.time)
            }
        };
        // Ahead of every queue in the heap (ties go to the lower index, as in the
        // heap): the next event without a heap push and pop.
        // `hot`, when set, is before everything in the heap.
        let next = (t, q);
        match self.hot {
            None if self.heap.peek().is_none_or(|r| next < r.0) => self.hot = Some(next),
            Some(h) if next < h => {
                self.heap.push(Reverse(h));
                self.hot = Some(next);
            }
            _ => self.heap.push(Reverse(next)),
        }
    }

    fn start(&mut self) {
        self.started = true;
        for q in 0..self.queues.len() {
            self.fill(q);
        }
        for q in 0..self.queues.len() {
            self.schedule(q);
        }
        self.next_task = self.tasks.next();
    }

    fn thread(&self, ctx: u32) -> Thread {
        match self.shared.rec.space.contexts.get(ctx as usize) {
            Some(c) => Thread {
                pid: (c.pid != 0).then_some(c.pid),
                tid: (c.tid != 0).then_some(c.tid),
            },
            None => Thread::default(),
        }
    }

    /// The branch event of queue `q` at `time` from `from` to `to`, named. Inlined into
    /// the merge loop for plain branches, nearly every event.
    #[inline(always)]
    fn trace(
        &mut self,
        q: usize,
        time: u64,
        change: Option<TraceStateChange>,
        kind: Option<Kind>,
        from: u64,
        to: u64,
    ) -> Event {
        let qs = &self.queues[q];
        let (ctx, thread, image, in_transaction) = (qs.ctx, qs.thread, qs.image, qs.in_tx);
        // Borrows the fields it needs, not `self`: cloning the `Arc` here, once per
        // event, was most of the merge's time (its count's cache line bounced between
        // this thread and the workers reading beside it).
        let space = &self.shared.rec.space;
        let src = self
            .namer
            .location(space, &mut self.strings, ctx, image, from);
        let dst = self
            .namer
            .location(space, &mut self.strings, ctx, image, to);
        Event::Ok {
            thread,
            time,
            in_transaction,
            data: EventData::Trace {
                change,
                kind,
                src,
                dst,
            },
        }
    }

    /// The pipeline event for queue `q`'s event `e`, if it makes one.
    #[inline(never)]
    fn convert(&mut self, q: usize, e: PtEvent, time: u64) -> Option<Event> {
        let (thread, in_transaction) = {
            let qs = &self.queues[q];
            (qs.thread, qs.in_tx)
        };
        let (ctx, image) = (self.queues[q].ctx, self.queues[q].image);
        let loc = |s: &mut Self, ip: u64| {
            s.namer
                .location(&s.shared.rec.space, &mut s.strings, ctx, image, ip)
        };
        match e.kind {
            EventKind::Space(c) => {
                let thread = self.thread(c);
                let image = self
                    .shared
                    .rec
                    .space
                    .contexts
                    .get(c as usize)
                    .map_or(u32::MAX, |c| c.image);
                let qs = &mut self.queues[q];
                qs.ctx = c;
                qs.thread = thread;
                qs.image = image;
                None
            }
            EventKind::Branch { kind, from, to } => {
                Some(self.trace(q, time, None, Some(kind_of(kind)), from, to))
            }
            EventKind::Start { at, .. } => {
                Some(self.trace(q, time, Some(TraceStateChange::Start), None, 0, at))
            }
            EventKind::Stop { from, why } => {
                let kind = match why {
                    StopReason::Branch(k) => Some(kind_of(k)),
                    StopReason::Async => Some(Kind::Async),
                    StopReason::TraceStop => None,
                };
                Some(self.trace(q, time, Some(TraceStateChange::End), kind, from, 0))
            }
            EventKind::Error { error, ip, .. } => {
                self.errors += 1;
                let message = self.strings.intern(error.message());
                Some(Event::DecodeError {
                    thread,
                    time: Some(time),
                    ip: (ip != 0).then_some(ip),
                    message,
                })
            }
            EventKind::Ptwrite { ip, payload } => {
                let h = loc(self, ip);
                let location = *self.strings.location(h);
                Some(Event::Ok {
                    thread,
                    time,
                    in_transaction,
                    data: EventData::Ptwrite {
                        location,
                        data: payload,
                    },
                })
            }
            EventKind::Cbr { ratio } => {
                if self.queues[q].cbr == Some(ratio) {
                    return None;
                }
                self.queues[q].cbr = Some(ratio);
                Some(Event::Ok {
                    thread,
                    time,
                    in_transaction,
                    data: EventData::Power {
                        freq_mhz: u32::from(ratio) * 100,
                    },
                })
            }
            EventKind::Tsx { intx, .. } => {
                self.queues[q].in_tx = intx;
                None
            }
            EventKind::Fact { .. } | EventKind::Block { .. } => None,
        }
    }

    /// Appends the merge's next event to `out`; false at the end (once started).
    /// Inlined into both ways of taking events; a plain branch is made in place.
    #[inline(always)]
    fn advance(&mut self, out: &mut Vec<Event>) -> bool {
        loop {
            let head = self.hot.or_else(|| self.heap.peek().map(|r| r.0));
            // Side band first when it is not later.
            if let Some(t) = &self.next_task {
                if head.is_none_or(|(ht, _)| t.time <= ht) {
                    let t = self.next_task.take();
                    self.next_task = self.tasks.next();
                    if let Some(t) = t {
                        self.stats.events += 1;
                        let e = self.task_event(t);
                        out.push(e);
                        return true;
                    }
                }
            }
            let Some((time, q)) = self.hot.take().or_else(|| self.heap.pop().map(|r| r.0)) else {
                return false;
            };
            let e = {
                let qs = &mut self.queues[q];
                let e = qs.current[qs.pos];
                qs.pos += 1;
                e
            };
            let made = match e.kind {
                EventKind::Branch { kind, from, to } => {
                    let ev = self.trace(q, time, None, Some(kind_of(kind)), from, to);
                    out.push(ev);
                    true
                }
                _ => match self.convert(q, e, time) {
                    Some(ev) => {
                        out.push(ev);
                        true
                    }
                    None => false,
                },
            };
            self.schedule(q);
            if made {
                self.stats.events += 1;
                return true;
            }
        }
    }

    fn task_event(&mut self, t: TaskAt) -> Event {
        let thread = Thread {
            pid: (t.pid != 0).then_some(t.pid),
            tid: (t.tid != 0).then_some(t.tid),
        };
        let data = match t.task {
            Task::Comm { name, exec } => EventData::Comm {
                name: self.strings.intern_bytes(&name),
                exec,
            },
            Task::Fork { ppid, ptid } => EventData::Fork {
                parent: Thread {
                    pid: (ppid != 0).then_some(ppid),
                    tid: (ptid != 0).then_some(ptid),
                },
            },
        };
        Event::Ok {
            thread,
            time: t.time,
            in_transaction: false,
            data,
        }
    }
}

/// The event model's kind of a decoded branch.
fn kind_of(k: BranchKind) -> Kind {
    match k {
        BranchKind::Jcc | BranchKind::Jmp | BranchKind::IndJmp => Kind::Jump,
        BranchKind::Call | BranchKind::IndCall => Kind::Call,
        BranchKind::Ret => Kind::Return,
        BranchKind::Far => Kind::Call,
        BranchKind::Syscall => Kind::Syscall,
        BranchKind::Sysret => Kind::Sysret,
        BranchKind::Int => Kind::Interrupt,
        BranchKind::Async => Kind::Async,
        BranchKind::TxAbort => Kind::TxAbort,
    }
}

impl EventSource for PtSource {
    fn info(&self) -> ptscope_event::SourceInfo {
        // Branches are timed by instructions between exactly timed packets: where they
        // ran, not when a packet revealed them.
        let mut i = ptscope_event::SourceInfo::default();
        i.exact_times = true;
        i.recording = Some(self.shared.data.path().to_path_buf());
        i.ocaml_exception_info = self.ocaml.clone();
        i
    }
    fn next_event(&mut self) -> Result<Option<Event>, SourceError> {
        if !self.started {
            self.start();
        }
        let mut one = std::mem::take(&mut self.one);
        one.clear();
        self.advance(&mut one);
        let e = one.pop();
        self.one = one;
        Ok(e)
    }

    /// One call fills a batch: the merge loop runs without returning a large `Result`
    /// per event (that return and the call around it were a sixth of the merge's
    /// instructions).
    fn next_events(&mut self, out: &mut Vec<Event>, max: usize) -> Result<bool, SourceError> {
        if !self.started {
            self.start();
        }
        for _ in 0..max {
            if !self.advance(out) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn strings(&self) -> &StringTable {
        &self.strings
    }

    fn stats(&self) -> Stats {
        self.stats
    }

    fn warnings(&self) -> Vec<Warning> {
        Vec::new()
    }

    fn size(&self) -> Option<u64> {
        Some(self.size)
    }

    fn finish(mut self: Box<Self>) -> Finished {
        self.pool.stop();
        let mut f = Finished::new(std::mem::take(&mut self.strings));
        f.notices = std::mem::take(&mut self.notices);
        f.incomplete = std::mem::take(&mut self.incomplete);
        f
    }
}

impl Drop for PtSource {
    fn drop(&mut self) {
        self.pool.stop();
    }
}
