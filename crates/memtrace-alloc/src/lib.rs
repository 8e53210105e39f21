//! A sampling allocation tracer for Rust programs that writes memtrace (v3) traces,
//! readable by `ptscope mem` and the OCaml memtrace tools.
//!
//! Install [`MemtraceAlloc`] as the global allocator and call
//! [`trace_if_requested`] early in `main`; when the `MEMTRACE` environment variable
//! names a file, allocations are sampled (each word with probability
//! `MEMTRACE_RATE`, default 1e-5) with their backtraces, and frees are recorded as
//! collections.
//!
//! ```no_run
//! use memtrace_alloc::MemtraceAlloc;
//!
//! #[global_allocator]
//! static ALLOC: MemtraceAlloc = MemtraceAlloc::system();
//!
//! fn main() {
//!     let _trace = memtrace_alloc::trace_if_requested();
//!     let v: Vec<u64> = (0..1_000_000).collect();
//!     println!("{}", v.len());
//! }
//! ```
//!
//! Costs: with tracing off, one relaxed atomic load per allocation and free. With it
//! on, a thread-local countdown per allocation; only sampled allocations (and frees
//! of sampled blocks, found through a small counting filter) take the tracer's lock.
//! The tracer's own allocations pass straight through (thread-local re-entrancy
//! flag), and a forked child stops tracing without writing to its parent's file.

#![warn(missing_docs)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::c_void;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

use memtrace::sampler::GeometricSampler;
use memtrace::{AllocSource, OwnedLocation, TraceInfo, Writer};
use rustc_hash::FxHashMap;

/// Sampling rate (probability per 8-byte word) when `MEMTRACE_RATE` is unset.
pub const DEFAULT_RATE: f64 = 1e-5;
/// Deepest backtrace recorded (innermost frames are kept).
pub const MAX_FRAMES: usize = 256;

/// 0 when not tracing, else the current trace's epoch (1..=0xffff). Thread
/// countdowns carry the epoch they were drawn in, so a new trace (perhaps at another
/// rate) never inherits a stale countdown.
static STATE: AtomicU32 = AtomicU32::new(0);
static LAST_EPOCH: AtomicU32 = AtomicU32::new(0);
const COUNT_BITS: u32 = 48;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
static TRACER: Mutex<Option<Tracer>> = Mutex::new(None);
static ATEXIT: Once = Once::new();

const FILTER_BITS: u32 = 16;
/// Counts of live sampled blocks per address hash: a free whose count is zero
/// cannot be a sampled block and skips the lock.
static LIVE: [AtomicU16; 1 << FILTER_BITS] = [const { AtomicU16::new(0) }; 1 << FILTER_BITS];

thread_local! {
    /// Epoch (high 16 bits) and words until this thread's next sample point (low
    /// 48 bits); a count of 0 or another epoch means "draw one first".
    static COUNTDOWN: Cell<u64> = const { Cell::new(0) };
    /// Set while this thread runs tracer code, whose allocations are not traced.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

#[inline]
fn filter_slot(p: *mut u8) -> usize {
    (((p as usize as u64) >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - FILTER_BITS)) as usize
}

/// Marks the thread busy for the guard's lifetime; `None` if it already was.
struct Busy;

impl Busy {
    fn enter() -> Option<Busy> {
        BUSY.try_with(|b| if b.replace(true) { None } else { Some(Busy) })
            .ok()
            .flatten()
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = BUSY.try_with(|b| b.set(false));
    }
}

struct Symbol {
    internal: bool,
    locations: Vec<OwnedLocation>,
}

struct Tracer {
    writer: Writer<File>,
    sampler: GeometricSampler,
    pid: u32,
    live: FxHashMap<usize, u64>,
    symbols: FxHashMap<u64, Symbol>,
    frames: Vec<u64>,
    last_time: i64,
}

fn lock() -> MutexGuard<'static, Option<Tracer>> {
    TRACER.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// Frames of the allocator plumbing (ours, std's and the unwinder's), dropped from
/// the innermost end of every backtrace.
fn is_internal(name: &str) -> bool {
    const PREFIXES: [&str; 6] = [
        "memtrace_alloc::",
        "<memtrace_alloc::",
        "backtrace::",
        "alloc::alloc::",
        "<alloc::alloc::",
        "std::alloc::",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
        || [
            "__rust_alloc",
            "__rust_realloc",
            "__rust_dealloc",
            "__rdl_",
            "__rg_",
        ]
        .iter()
        .any(|p| name.contains(p))
}

fn symbolize(ip: u64) -> Symbol {
    // Innermost first, as the resolver reports inlined frames: (internal, location).
    let mut found: Vec<(bool, OwnedLocation)> = Vec::new();
    // `ip` is a return address: look up the call instruction before it.
    let addr = ip.saturating_sub(1) as usize as *mut c_void;
    // SAFETY: called with the tracer lock held, which serialises all our use of the
    // unsynchronised backtrace API.
    unsafe {
        backtrace::resolve_unsynchronized(addr, |sym| {
            let name = sym
                .name()
                .map(|n| format!("{n:#}"))
                .unwrap_or_else(|| "??".into());
            let filename = sym
                .filename()
                .map(|f| f.display().to_string())
                .unwrap_or_else(|| "<unknown>".into());
            let col = sym.colno().map_or(0, i64::from);
            found.push((
                is_internal(&name),
                OwnedLocation {
                    filename: filename.into_bytes(),
                    defname: name.into_bytes(),
                    line: sym.lineno().map_or(0, i64::from),
                    start_char: col,
                    end_char: col,
                },
            ));
        });
    }
    // The code belongs to its outermost function: allocator plumbing inlined into the
    // program's own function (`Box::new`'s `exchange_malloc` in an optimised build) does
    // not make the program's frame internal, it is only trimmed from its innermost end.
    let internal = found.last().is_some_and(|(i, _)| *i);
    if !internal {
        let plumbing = found.iter().take_while(|(i, _)| *i).count();
        found.drain(..plumbing);
    }
    // Traces list inlined frames outermost first.
    let locations = found.into_iter().rev().map(|(_, l)| l).collect();
    Symbol {
        internal,
        locations,
    }
}

impl Tracer {
    fn time(&mut self) -> i64 {
        self.last_time = self.last_time.max(now_us());
        self.last_time
    }

    fn record_alloc(&mut self, ptr: *mut u8, words: u64, nsamples: u64) -> memtrace::Result<()> {
        self.frames.clear();
        let frames = &mut self.frames;
        // SAFETY: serialised by the tracer lock, like `symbolize`.
        unsafe {
            backtrace::trace_unsynchronized(|f| {
                // Code 0 would hit the codec's zero-filled cache without ever being
                // defined as a location; a null return address ends the stack anyway.
                let ip = f.ip() as usize as u64;
                if ip == 0 {
                    return false;
                }
                frames.push(ip);
                frames.len() < MAX_FRAMES
            });
        }
        let mut skip = 0;
        while skip < self.frames.len() {
            let ip = self.frames[skip];
            let sym = self.symbols.entry(ip).or_insert_with(|| symbolize(ip));
            if !sym.internal {
                break;
            }
            skip += 1;
        }
        let now = self.time();
        let symbols = &mut self.symbols;
        let id = self.writer.put_alloc_innermost_first(
            now,
            0,
            words as i64,
            nsamples as i64,
            AllocSource::External,
            &self.frames[skip..],
            &mut |code| {
                symbols
                    .entry(code)
                    .or_insert_with(|| symbolize(code))
                    .locations
                    .clone()
            },
        )?;
        self.live.insert(ptr as usize, id);
        let slot = &LIVE[filter_slot(ptr)];
        let _ = slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_add(1));
        Ok(())
    }

    fn record_free(&mut self, ptr: *mut u8) -> memtrace::Result<()> {
        if let Some(id) = self.live.remove(&(ptr as usize)) {
            let slot = &LIVE[filter_slot(ptr)];
            let _ = slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_sub(1));
            let now = self.time();
            self.writer.put_collect(now, 0, id)?;
        }
        Ok(())
    }
}

/// Stops tracing without writing anything more (error, or forked child).
fn abandon(slot: &mut Option<Tracer>) {
    STATE.store(0, Ordering::SeqCst);
    *slot = None;
}

/// Runs `f` on the tracer unless this is a forked child, disabling tracing on error.
fn with_tracer(f: impl FnOnce(&mut Tracer) -> memtrace::Result<()>) {
    let Some(_busy) = Busy::enter() else { return };
    let mut g = lock();
    let Some(t) = g.as_mut() else { return };
    if std::process::id() != t.pid || f(t).is_err() {
        abandon(&mut g);
    }
}

#[cold]
fn sample_alloc(ptr: *mut u8, size: usize) {
    let words = (size as u64).div_ceil(8).max(1);
    let Some(_busy) = Busy::enter() else { return };
    let mut g = lock();
    let Some(t) = g.as_mut() else { return };
    if std::process::id() != t.pid {
        abandon(&mut g);
        return;
    }
    let epoch = u64::from(STATE.load(Ordering::Relaxed));
    let v = COUNTDOWN.try_with(Cell::get).unwrap_or(0);
    let mut c = if v >> COUNT_BITS == epoch {
        v & COUNT_MASK
    } else {
        0
    };
    if c == 0 {
        c = t.sampler.draw().min(COUNT_MASK);
    }
    let mut rem = words;
    let mut n = 0u64;
    while rem >= c {
        n += 1;
        rem -= c;
        c = t.sampler.draw().min(COUNT_MASK);
    }
    let _ = COUNTDOWN.try_with(|cd| cd.set(epoch << COUNT_BITS | (c - rem)));
    if n > 0 && t.record_alloc(ptr, words, n).is_err() {
        abandon(&mut g);
    }
}

#[inline]
fn on_alloc(ptr: *mut u8, size: usize) {
    let epoch = STATE.load(Ordering::Relaxed);
    if ptr.is_null() || epoch == 0 {
        return;
    }
    let words = (size as u64).div_ceil(8);
    let fast = COUNTDOWN
        .try_with(|c| {
            let v = c.get();
            if v >> COUNT_BITS == u64::from(epoch) && words < v & COUNT_MASK {
                c.set(v - words);
                true
            } else {
                false
            }
        })
        .unwrap_or(true);
    if !fast {
        sample_alloc(ptr, size);
    }
}

#[inline]
fn on_free(ptr: *mut u8) {
    if STATE.load(Ordering::Relaxed) == 0 || LIVE[filter_slot(ptr)].load(Ordering::Relaxed) == 0 {
        return;
    }
    with_tracer(|t| t.record_free(ptr));
}

/// A [`GlobalAlloc`] wrapper that samples allocations into a memtrace trace.
#[derive(Debug, Default)]
pub struct MemtraceAlloc<A = System> {
    inner: A,
}

impl MemtraceAlloc<System> {
    /// Wraps the system allocator.
    pub const fn system() -> Self {
        MemtraceAlloc { inner: System }
    }
}

impl<A> MemtraceAlloc<A> {
    /// Wraps another allocator.
    pub const fn new(inner: A) -> Self {
        MemtraceAlloc { inner }
    }
}

// SAFETY: every call is forwarded unchanged to `inner`; tracing only observes.
unsafe impl<A: GlobalAlloc> GlobalAlloc for MemtraceAlloc<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = self.inner.alloc(layout);
        on_alloc(p, layout.size());
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = self.inner.alloc_zeroed(layout);
        on_alloc(p, layout.size());
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Record before freeing so the address cannot be reused in between.
        on_free(ptr);
        self.inner.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        on_free(ptr);
        let p = self.inner.realloc(ptr, layout, new_size);
        on_alloc(p, new_size);
        p
    }
}

/// Where and how to trace.
#[derive(Clone, Debug)]
pub struct TraceOptions {
    /// Output file.
    pub path: PathBuf,
    /// Probability per 8-byte word that it is a sample point (1.0 traces everything).
    pub rate: f64,
    /// Free-form context stored in the trace.
    pub context: Option<String>,
    /// Sampler seed (random if `None`).
    pub seed: Option<u64>,
}

impl TraceOptions {
    /// Traces to `path` at the default rate.
    pub fn new(path: impl AsRef<Path>) -> Self {
        TraceOptions {
            path: path.as_ref().to_path_buf(),
            rate: DEFAULT_RATE,
            context: None,
            seed: None,
        }
    }
}

extern "C" fn stop_at_exit() {
    let _ = stop();
}

extern "C" {
    fn atexit(f: extern "C" fn()) -> i32;
}

/// Starts tracing (fails if a trace is already being written).
pub fn start(opts: &TraceOptions) -> std::io::Result<()> {
    let busy = Busy::enter();
    let mut g = lock();
    if g.is_some() {
        return Err(std::io::Error::other("memtrace: already tracing"));
    }
    // Not File::create: a root program tracing into /tmp must not follow another user's
    // link, open their fifo or empty a file of root's they hard-linked there.
    let file = ptscope_rootsafe::replace_in_place(&opts.path)?;
    let pid = std::process::id();
    let start_time = now_us();
    let info = TraceInfo {
        sample_rate: opts.rate,
        word_size: 64,
        executable_name: std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
            .into_bytes(),
        host_name: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
            .into_bytes(),
        ocaml_runtime_params: Vec::new(),
        pid: u64::from(pid),
        initial_domain: 0,
        start_time,
        context: opts.context.clone().map(String::into_bytes),
    };
    let writer = Writer::new(file, &info)
        .map_err(|e| std::io::Error::other(e.to_string()))?
        .with_pid_check(|| u64::from(std::process::id()));
    let seed = opts
        .seed
        .unwrap_or_else(|| (start_time as u64) ^ (u64::from(pid) << 32));
    *g = Some(Tracer {
        writer,
        sampler: GeometricSampler::new(opts.rate, seed),
        pid,
        live: FxHashMap::default(),
        symbols: FxHashMap::default(),
        frames: Vec::with_capacity(MAX_FRAMES),
        last_time: start_time,
    });
    ATEXIT.call_once(|| {
        // SAFETY: registering a plain function with the C runtime.
        unsafe {
            atexit(stop_at_exit);
        }
    });
    let epoch = LAST_EPOCH.load(Ordering::Relaxed) % 0xffff + 1;
    LAST_EPOCH.store(epoch, Ordering::Relaxed);
    STATE.store(epoch, Ordering::SeqCst);
    drop(g);
    drop(busy);
    Ok(())
}

/// Stops tracing and writes out what is buffered. In a forked child it writes nothing.
pub fn stop() -> memtrace::Result<()> {
    let _busy = Busy::enter();
    let mut g = lock();
    STATE.store(0, Ordering::SeqCst);
    let Some(mut t) = g.take() else { return Ok(()) };
    for slot in &LIVE {
        slot.store(0, Ordering::Relaxed);
    }
    if std::process::id() != t.pid {
        return Ok(());
    }
    t.writer.flush()
}

/// True while a trace is being written by this process.
pub fn is_tracing() -> bool {
    STATE.load(Ordering::Relaxed) != 0
}

/// Stops tracing when dropped.
#[derive(Debug)]
pub struct TraceGuard(());

impl Drop for TraceGuard {
    fn drop(&mut self) {
        let _ = stop();
    }
}

/// Starts tracing if `MEMTRACE` names an output file (`MEMTRACE_RATE` sets the rate,
/// `MEMTRACE_CONTEXT` a context string). Problems are reported on stderr.
pub fn trace_if_requested() -> Option<TraceGuard> {
    let path = std::env::var_os("MEMTRACE").filter(|p| !p.is_empty())?;
    let mut opts = TraceOptions::new(path);
    if let Some(r) = std::env::var_os("MEMTRACE_RATE") {
        match r.to_str().and_then(|s| s.parse::<f64>().ok()) {
            Some(rate) if rate > 0.0 && rate <= 1.0 => opts.rate = rate,
            _ => {
                eprintln!("memtrace: MEMTRACE_RATE must be a number in (0, 1]; tracing disabled");
                return None;
            }
        }
    }
    opts.context = std::env::var("MEMTRACE_CONTEXT").ok();
    match start(&opts) {
        Ok(()) => Some(TraceGuard(())),
        Err(e) => {
            eprintln!("memtrace: cannot trace to {}: {e}", opts.path.display());
            None
        }
    }
}
